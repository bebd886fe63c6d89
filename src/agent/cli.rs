//! Command-line interface of `media-capabilities`.

use clap::Parser;

/// Publishes what each GPU's VA-API driver states it can decode, encode and scale as
/// `media.liken.sh` DRA devices.
#[derive(Debug, Parser)]
#[command(name = "media-capabilities", version)]
pub struct Cli {}
