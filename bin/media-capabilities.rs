//! Entry point of the capabilities agent; all behaviour lives in the library.

use clap::Parser;
use media_operator::agent::cli::Cli;

fn main() {
    let _cli = Cli::parse();
}
