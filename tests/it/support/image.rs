//! The agent's image (deploy/Dockerfile), built and run as its instructions say, without a
//! container runtime: nothing may be pulled from a container registry here, and the package
//! registries are the only source. So the Dockerfile's own `docker build` cannot run; instead
//! every instruction is carried out by hand, and one this module does not know fails the build
//! (so a new line in the Dockerfile cannot go unbuilt):
//!
//! - build stage (`FROM rust:V-trixie`, `WORKDIR`, `COPY . .`, `RUN cargo build --profile dist
//!   ...`): the RUN's cargo command, run in this checkout with this machine's toolchain, into a
//!   target directory of its own beside the tree's cache (kept between runs, as Go's build cache
//!   is; the context's `.dockerignore` leaves out `target/`, as a separate directory does), in
//!   the profile it names (dist: fat LTO and one codegen unit, so the binary tested is the one
//!   that ships; cold about 12 min of CPU, after a change to the crate about 6, most of it LTO
//!   on one core while the other runs tests). The toolchain here links against Debian 12's
//!   glibc 2.36, older than the builder's 2.41: the binary's symbol versions are checked against
//!   the image's libraries instead.
//! - runtime stage `FROM docker.io/library/debian:SUITE-slim`: what debuerreotype makes that
//!   image from, with mmdebstrap: Debian SUITE's `minbase` variant from deb.debian.org, the
//!   slim variant's dpkg excludes (debuerreotype `scripts/.slimify-excludes`, `-includes`), and
//!   the image's `/etc/apt/sources.list.d/debian.sources` as debuerreotype writes it (the layout
//!   this machine's own Debian 12 image has);
//! - each runtime `RUN`: word for word, `/bin/sh -c` in a chroot of that tree, as Docker's
//!   shell form runs it (with the network, as a build has it);
//! - `COPY --from=build SRC DST`: the binary the build stage made, copied to DST in a layer of
//!   its own (an overlay over the cached tree, per run);
//! - `USER`, `STOPSIGNAL`, `ENTRYPOINT`: how [`Sandbox`] runs it: the entry point as the
//!   process itself (in a mount namespace, chrooted into a read-only overlay of the tree, as
//!   the DaemonSet's `readOnlyRootFilesystem`), as that user with every capability dropped and
//!   no new privileges (the DaemonSet's securityContext; its seccomp profile is the runtime's and
//!   is not reproduced), stopped with the STOPSIGNAL.
//!
//! The runtime tree is cached outside the checkout (CI runs in a fresh clone), keyed on the
//! runtime stage's instructions, the sources and the archive's signed index of each suite
//! (`InRelease`, which names every package's version): a new Debian point release or security
//! update rebuilds it, nothing else does. Building needs root and mmdebstrap (.ci/run installs
//! it); tests that need it are `#[cfg_attr(not(have_image_tools), ignore)]`.

use std::ffi::CString;
use std::fs;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::dockerfile::{self, Instruction, Stage};

/// Changes whenever this module builds the tree differently, so an old cache is not reused.
const BUILDER_REVISION: &str = "1";

/// debuerreotype's slim variant (`scripts/.slimify-excludes` and `.slimify-includes`), as dpkg
/// path filters: the image's `-slim` leaves these out of every package, and so of the packages
/// the RUN installs.
const SLIM_EXCLUDES: &[&str] = &[
    "/usr/share/doc/*",
    "/usr/share/info/*",
    "/usr/share/linda/*",
    "/usr/share/lintian/overrides/*",
    "/usr/share/locale/*",
    "/usr/share/man/*",
    "/usr/share/doc/kde/HTML/*/*",
    "/usr/share/gnome/help/*/*",
    "/usr/share/omf/*/*-*.emf",
];
const SLIM_INCLUDES: &[&str] = &[
    "/usr/share/doc/*/copyright",
    "/usr/share/doc/kde/HTML/C/*",
    "/usr/share/gnome/help/*/C/*",
    "/usr/share/locale/all_languages",
    "/usr/share/locale/currency/*",
    "/usr/share/locale/l10n/*",
    "/usr/share/locale/languages",
    "/usr/share/locale/locale.alias",
    "/usr/share/omf/*/*-C.emf",
];

/// Where Debian's official images take their packages from.
const MIRROR: &str = "http://deb.debian.org/debian";
const SECURITY_MIRROR: &str = "http://deb.debian.org/debian-security";

/// The image's `debian.sources` (deb822), as debuerreotype writes it for SUITE.
fn debian_sources(suite: &str) -> String {
    format!(
        "Types: deb\nURIs: {MIRROR}\nSuites: {suite} {suite}-updates\nComponents: main\n\
         Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
         Types: deb\nURIs: {SECURITY_MIRROR}\nSuites: {suite}-security\nComponents: main\n\
         Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
}

/// The build stage, as far as building the binary goes.
#[derive(Debug)]
pub struct BuildStage {
    pub name: String,
    pub from: String,
    pub workdir: String,
    /// The RUN's words after `cargo`.
    pub cargo_args: Vec<String>,
}

/// The runtime stage's instructions, each in the form this module carries out.
#[derive(Debug)]
pub struct RuntimeStage {
    pub from: String,
    /// Debian's codename, from the `debian:SUITE-slim` tag.
    pub suite: String,
    pub runs: Vec<String>,
    /// `COPY --from=STAGE SRC DST`.
    pub copy: (String, String, String),
    pub user: (u32, u32),
    pub stop_signal: String,
    pub entrypoint: Vec<String>,
}

/// What the Dockerfile says, every instruction accounted for.
#[derive(Debug)]
pub struct Plan {
    pub build: BuildStage,
    pub runtime: RuntimeStage,
}

fn unknown(instruction: &Instruction, stage: &str) -> String {
    format!(
        "deploy/Dockerfile:{}: {} in the {stage} stage is not reproduced by the image test \
         (hint: teach tests/it/support/image.rs to carry it out)",
        instruction.line, instruction.keyword
    )
}

/// Reads the Dockerfile's two stages.
pub fn plan() -> Result<Plan, String> {
    let stages = dockerfile::stages();
    let [build, runtime] = stages.as_slice() else {
        return Err(format!(
            "deploy/Dockerfile has {} stages; the image test knows a build and a runtime stage",
            stages.len()
        ));
    };
    Ok(Plan {
        build: build_stage(build)?,
        runtime: runtime_stage(runtime)?,
    })
}

fn build_stage(stage: &Stage) -> Result<BuildStage, String> {
    let name = stage.name.clone().ok_or("the build stage has no AS name")?;
    let mut workdir = None;
    let mut cargo_args = None;
    for instruction in &stage.instructions {
        match (instruction.keyword.as_str(), instruction.args.as_str()) {
            ("WORKDIR", dir) => workdir = Some(dir.to_owned()),
            // The whole context: this checkout.
            ("COPY", ". .") => {}
            ("RUN", run) if run.starts_with("cargo ") && !run.contains("&&") => {
                cargo_args = Some(run.split_whitespace().skip(1).map(str::to_owned).collect());
            }
            _ => return Err(unknown(instruction, "build")),
        }
    }
    Ok(BuildStage {
        name,
        from: stage.from.clone(),
        workdir: workdir.ok_or("the build stage has no WORKDIR")?,
        cargo_args: cargo_args.ok_or("the build stage runs no cargo build")?,
    })
}

fn runtime_stage(stage: &Stage) -> Result<RuntimeStage, String> {
    let suite = stage
        .from
        .strip_prefix("docker.io/library/debian:")
        .and_then(|tag| tag.strip_suffix("-slim"))
        .ok_or_else(|| {
            format!(
                "deploy/Dockerfile:{}: the runtime is {}; the image test builds \
                 docker.io/library/debian:SUITE-slim only",
                stage.line, stage.from
            )
        })?
        .to_owned();
    let (mut runs, mut copy, mut user, mut stop_signal, mut entrypoint) =
        (Vec::new(), None, None, None, None);
    for instruction in &stage.instructions {
        let args = instruction.args.as_str();
        match instruction.keyword.as_str() {
            "RUN" if !args.starts_with('[') => runs.push(args.to_owned()),
            "COPY" => {
                let words: Vec<&str> = args.split_whitespace().collect();
                match words.as_slice() {
                    [from, src, dst] if from.starts_with("--from=") => {
                        copy = Some((from[7..].to_owned(), (*src).to_owned(), (*dst).to_owned()));
                    }
                    _ => return Err(unknown(instruction, "runtime")),
                }
            }
            "USER" => {
                let (u, g) = args.split_once(':').unwrap_or((args, args));
                match (u.parse(), g.parse()) {
                    (Ok(u), Ok(g)) => user = Some((u, g)),
                    _ => return Err(format!("deploy/Dockerfile: USER {args} is not numeric")),
                }
            }
            "STOPSIGNAL" => stop_signal = Some(args.to_owned()),
            "ENTRYPOINT" => {
                entrypoint = Some(
                    serde_json::from_str::<Vec<String>>(args)
                        .map_err(|e| format!("ENTRYPOINT is not the exec form: {e}"))?,
                );
            }
            _ => return Err(unknown(instruction, "runtime")),
        }
    }
    Ok(RuntimeStage {
        from: stage.from.clone(),
        suite,
        runs,
        copy: copy.ok_or("the runtime copies no binary")?,
        // Docker's default user.
        user: user.unwrap_or((0, 0)),
        stop_signal: stop_signal.unwrap_or_else(|| "SIGTERM".into()),
        entrypoint: entrypoint.ok_or("the runtime has no ENTRYPOINT")?,
    })
}

/// The image, built: the runtime tree and the binary the build stage made.
#[derive(Debug)]
pub struct Image {
    pub plan: Plan,
    /// The runtime stage's tree (cached; never written to).
    pub root: PathBuf,
    /// The binary, where the build stage left it.
    pub binary: PathBuf,
    /// Every package in the tree: (name, version).
    pub packages: Vec<(String, String)>,
    /// How long building the binary and the tree took in this process (zero when cached).
    pub binary_build: Duration,
    pub root_build: Duration,
}

/// The image, built once per test process (a failure is kept, so every test says why).
pub fn built() -> &'static Image {
    static IMAGE: OnceLock<Result<Image, String>> = OnceLock::new();
    IMAGE
        .get_or_init(build)
        .as_ref()
        .unwrap_or_else(|e| panic!("build the agent's image: {e}"))
}

fn build() -> Result<Image, String> {
    let plan = plan()?;
    let started = Instant::now();
    let binary = build_binary(&plan)?;
    let binary_build = started.elapsed();
    let started = Instant::now();
    let (root, built_now) = runtime_tree(&plan.runtime)?;
    let root_build = if built_now {
        started.elapsed()
    } else {
        Duration::ZERO
    };
    let packages = installed_packages(&root)?;
    Ok(Image {
        plan,
        root,
        binary,
        packages,
        binary_build,
        root_build,
    })
}

/// Runs the build stage's cargo command here, word for word; the binary is where its COPY takes
/// it from, in the directory of the profile that command names.
fn build_binary(plan: &Plan) -> Result<PathBuf, String> {
    let build = &plan.build;
    let (from, src, _) = &plan.runtime.copy;
    if *from != build.name {
        return Err(format!("COPY --from={from}: no stage of that name"));
    }
    let args: Vec<&str> = build.cargo_args.iter().map(String::as_str).collect();
    let profile = args
        .windows(2)
        .find(|w| w[0] == "--profile")
        .map(|w| w[1])
        .ok_or_else(|| format!("the build stage's cargo {args:?} names no --profile"))?;
    let relative = src
        .strip_prefix(&format!("{}/target/{profile}/", build.workdir))
        .ok_or_else(|| format!("COPY takes {src}, not a {profile} build's binary"))?;
    let target = cache_dir().join("target");
    // Cargo (the one running these tests, when it is) locks the target directory it builds
    // in; this one is the image's own, so it builds while `cargo test` holds the tests'.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .args(&args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .map_err(|e| format!("run cargo: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        return Err(format!(
            "cargo {}: {}\n{}",
            args.join(" "),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    Ok(target.join(profile).join(relative))
}

/// Where runtime trees are kept between runs: outside the checkout, as Go's build cache is.
fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).to_path_buf());
    base.join("media-operator/image")
}

/// The suites the image's sources name.
fn suites(suite: &str) -> [(String, &'static str); 3] {
    [
        (suite.to_owned(), MIRROR),
        (format!("{suite}-updates"), MIRROR),
        (format!("{suite}-security"), SECURITY_MIRROR),
    ]
}

/// The cache key: what the tree is built from, and the archive's current index of each suite.
fn tree_key(runtime: &RuntimeStage, scratch: &Path) -> Result<String, String> {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [
        BUILDER_REVISION,
        &runtime.from,
        &debian_sources(&runtime.suite),
    ] {
        ctx.update(part.as_bytes());
        ctx.update(b"\0");
    }
    for run in &runtime.runs {
        ctx.update(run.as_bytes());
        ctx.update(b"\0");
    }
    for (suite, mirror) in suites(&runtime.suite) {
        let url = format!("{mirror}/dists/{suite}/InRelease");
        let file = scratch.join(format!("{suite}.InRelease"));
        // apt's own downloader: apt is on every Debian machine, curl is not.
        let out = Command::new("/usr/lib/apt/apt-helper")
            .args(["download-file", &url])
            .arg(&file)
            .output()
            .map_err(|e| format!("run apt-helper: {e} (hint: this needs Debian's apt)"))?;
        if !out.status.success() {
            return Err(format!(
                "download {url}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        ctx.update(&fs::read(&file).map_err(|e| format!("read {}: {e}", file.display()))?);
    }
    Ok(ctx.finish().as_ref()[..8]
        .iter()
        .fold(String::new(), |mut s, b| {
            let _ = std::fmt::Write::write_fmt(&mut s, format_args!("{b:02x}"));
            s
        }))
}

/// The runtime tree: from the cache, or built now (then `true`).
fn runtime_tree(runtime: &RuntimeStage) -> Result<(PathBuf, bool), String> {
    let cache = cache_dir().join("trees");
    fs::create_dir_all(&cache).map_err(|e| format!("create {}: {e}", cache.display()))?;
    // Another test process may be building the same tree: wait for it.
    let lock = fs::File::create(cache.join("build.lock")).map_err(|e| format!("lock: {e}"))?;
    lock.lock().map_err(|e| format!("lock: {e}"))?;
    let scratch = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let key = tree_key(runtime, scratch.path())?;
    let dir = cache.join(format!("{}-{key}", runtime.suite));
    let root = dir.join("root");
    if dir.join("complete").is_file() {
        return Ok((root, false));
    }
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let log = dir.join("build.log");
    let started = Instant::now();
    let _ = writeln!(
        std::io::stderr(),
        "building the image's {} tree into {} (a minute or two; cached after)",
        runtime.suite,
        dir.display()
    );
    mmdebstrap(runtime, &root, &log)?;
    fs::write(dir.join("complete"), format!("{:?}\n", started.elapsed()))
        .map_err(|e| format!("write the cache marker: {e}"))?;
    // Older trees (another key) are 400 MB each.
    for entry in fs::read_dir(&cache).into_iter().flatten().flatten() {
        if entry.path().is_dir() && entry.path() != dir {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
    Ok((root, true))
}

fn mmdebstrap(runtime: &RuntimeStage, root: &Path, log: &Path) -> Result<(), String> {
    let mut command = Command::new("mmdebstrap");
    command.args([
        "--mode=root",
        "--variant=minbase",
        "--format=directory",
        "--quiet",
    ]);
    for path in SLIM_EXCLUDES {
        command.arg(format!("--dpkgopt=path-exclude={path}"));
    }
    for path in SLIM_INCLUDES {
        command.arg(format!("--dpkgopt=path-include={path}"));
    }
    // The image's sources instead of the one-line list mmdebstrap writes.
    command.env("IMAGE_DEBIAN_SOURCES", debian_sources(&runtime.suite));
    command.arg(
        "--customize-hook=rm -f \"$1/etc/apt/sources.list\" && \
         printf '%s' \"$IMAGE_DEBIAN_SOURCES\" > \"$1/etc/apt/sources.list.d/debian.sources\"",
    );
    // Each RUN, word for word, as Docker's shell form runs it (the text travels in the
    // environment, so no quoting of ours can change it).
    for (index, run) in runtime.runs.iter().enumerate() {
        let var = format!("IMAGE_RUN_{index}");
        command.env(&var, run);
        command.arg(format!(
            "--customize-hook=chroot \"$1\" /bin/sh -c \"${var}\""
        ));
    }
    command
        .arg(&runtime.suite)
        .arg(root)
        .arg(format!("deb {MIRROR} {} main", runtime.suite));
    let log_file = fs::File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let status = command
        .stdin(std::process::Stdio::null())
        .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
        .stderr(log_file)
        .status()
        .map_err(|e| {
            format!("run mmdebstrap: {e} (hint: apt-get install mmdebstrap, as .ci/run does)")
        })?;
    if status.success() {
        return Ok(());
    }
    let text = fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(15).collect();
    Err(format!(
        "mmdebstrap {}: {status} (its log: {}):\n{}",
        runtime.suite,
        log.display(),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

/// Every installed package of the tree, from dpkg's status file.
fn installed_packages(root: &Path) -> Result<Vec<(String, String)>, String> {
    let path = root.join("var/lib/dpkg/status");
    let text = fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let mut packages = Vec::new();
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
        };
        if let (Some(name), Some(version), Some("install ok installed")) =
            (field("Package"), field("Version"), field("Status"))
        {
            packages.push((name.to_owned(), version.to_owned()));
        }
    }
    packages.sort();
    Ok(packages)
}

impl Image {
    /// The version of `package` in the image.
    pub fn version(&self, package: &str) -> Option<&str> {
        self.packages
            .iter()
            .find(|(name, _)| name == package)
            .map(|(_, version)| version.as_str())
    }

    /// Bytes of the tree plus the binary (files once each, as a layer stores them).
    pub fn size(&self) -> u64 {
        let out = Command::new("du")
            .args(["-s", "--bytes"])
            .arg(&self.root)
            .output()
            .expect("run du");
        let tree: u64 = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .expect("du prints a size");
        tree + fs::metadata(&self.binary).map(|m| m.len()).unwrap_or(0)
    }
}

/// One path of the host made visible in a [`Sandbox`].
struct Bind {
    host: PathBuf,
    inside: PathBuf,
    writable: bool,
}

/// A run of the image: an overlay of its tree with the COPY's layer and the mount points of
/// the binds, which a command enters in its own mount namespace.
pub struct Sandbox {
    image: &'static Image,
    dir: tempfile::TempDir,
    binds: Vec<Bind>,
}

impl Sandbox {
    pub fn new(image: &'static Image) -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir for a sandbox");
        for sub in ["upper", "work", "merged"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let sandbox = Sandbox {
            image,
            dir,
            binds: Vec::new(),
        };
        // The COPY's layer: the binary at its destination, with the build's permissions.
        let (_, _, dst) = &image.plan.runtime.copy;
        let copied = sandbox.upper(Path::new(dst));
        fs::create_dir_all(copied.parent().unwrap()).unwrap();
        fs::copy(&image.binary, &copied).expect("copy the binary into the image's layer");
        sandbox
    }

    fn upper(&self, inside: &Path) -> PathBuf {
        self.dir
            .path()
            .join("upper")
            .join(inside.strip_prefix("/").unwrap_or(inside))
    }

    /// Makes `host` (a file or a directory) visible at `inside`.
    pub fn bind(&mut self, host: &Path, inside: &Path, writable: bool) -> &mut Sandbox {
        let point = self.upper(inside);
        let in_tree = self
            .image
            .root
            .join(inside.strip_prefix("/").unwrap_or(inside));
        if !in_tree.exists() {
            fs::create_dir_all(point.parent().unwrap()).unwrap();
            if host.is_dir() {
                fs::create_dir_all(&point).unwrap();
            } else {
                fs::write(&point, b"").unwrap();
            }
        }
        self.binds.push(Bind {
            host: host.to_path_buf(),
            inside: inside.to_path_buf(),
            writable,
        });
        self
    }

    /// Makes `host` visible at the same path.
    pub fn bind_same(&mut self, host: &Path, writable: bool) -> &mut Sandbox {
        self.bind(host, host, writable)
    }

    /// The image's entry point with `args`, to run in the sandbox as the image runs it.
    pub fn entrypoint(&self) -> Command {
        let entrypoint = &self.image.plan.runtime.entrypoint;
        let mut command = self.command(&entrypoint[0]);
        command.args(&entrypoint[1..]);
        command
    }

    /// `program` (a path inside the image) in the sandbox, as the image's user with no
    /// capabilities, on a read-only root.
    pub fn command(&self, program: &str) -> Command {
        let setup = Setup::new(self);
        let mut command = Command::new(program);
        command.current_dir("/");
        // SAFETY: `enter` makes only system calls (no allocation, no locks) on data prepared
        // before the fork, as the child of a fork may.
        unsafe {
            command.pre_exec(move || setup.enter());
        }
        command
    }
}

/// What the child does between fork and exec, prepared beforehand.
struct Setup {
    merged: CString,
    overlay_options: CString,
    /// (host, target inside `merged`, writable)
    binds: Vec<(CString, CString, bool)>,
    proc_target: CString,
    user: (u32, u32),
    last_cap: i32,
}

fn c(path: &Path) -> CString {
    CString::new(path.as_os_str().as_encoded_bytes()).expect("a path without NUL")
}

impl Setup {
    fn new(sandbox: &Sandbox) -> Setup {
        let dir = sandbox.dir.path();
        let merged = dir.join("merged");
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            sandbox.image.root.display(),
            dir.join("upper").display(),
            dir.join("work").display()
        );
        let binds = sandbox
            .binds
            .iter()
            .map(|b| {
                let target = merged.join(b.inside.strip_prefix("/").unwrap_or(&b.inside));
                (c(&b.host), c(&target), b.writable)
            })
            .collect();
        let last_cap = fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(40);
        Setup {
            merged: c(&merged),
            overlay_options: CString::new(options).unwrap(),
            binds,
            proc_target: c(&merged.join("proc")),
            user: sandbox.image.plan.runtime.user,
            last_cap,
        }
    }

    /// Runs in the forked child: mount namespace, overlay, binds, /proc, read-only root,
    /// chroot, the image's user, no capabilities, no new privileges.
    fn enter(&self) -> std::io::Result<()> {
        fn check(result: libc::c_int) -> std::io::Result<()> {
            if result == -1 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
        let none = std::ptr::null::<libc::c_char>();
        // SAFETY: every pointer is a NUL-terminated string owned by `self` or null where the
        // call allows it; these calls change only this (forked) process.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                c"overlay".as_ptr(),
                self.merged.as_ptr(),
                c"overlay".as_ptr(),
                0,
                self.overlay_options.as_ptr().cast(),
            ))?;
            for (host, target, writable) in &self.binds {
                check(libc::mount(
                    host.as_ptr(),
                    target.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                if !writable {
                    check(libc::mount(
                        none,
                        target.as_ptr(),
                        none,
                        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                        std::ptr::null(),
                    ))?;
                }
            }
            check(libc::mount(
                c"proc".as_ptr(),
                self.proc_target.as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ))?;
            // readOnlyRootFilesystem: the root read-only, the binds as they are.
            check(libc::mount(
                none,
                self.merged.as_ptr(),
                none,
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                std::ptr::null(),
            ))?;
            check(libc::chroot(self.merged.as_ptr()))?;
            check(libc::chdir(c"/".as_ptr()))?;
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setgid(self.user.1))?;
            check(libc::setuid(self.user.0))?;
            // capabilities: drop: [ALL]. With the bounding set empty, uid 0 gains nothing at
            // exec; the inheritable and ambient sets are emptied so nothing comes through them.
            for cap in 0..=self.last_cap {
                check(libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0))?;
            }
            check(libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            ))?;
            clear_inheritable()?;
            // allowPrivilegeEscalation: false.
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        }
        Ok(())
    }
}

/// Empties this process's inheritable capabilities (capget, then capset with the rest kept).
fn clear_inheritable() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // _LINUX_CAPABILITY_VERSION_3: two 32-bit words of each set.
    let mut header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: header and data are the layouts capget/capset take (linux/capability.h).
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) == -1 {
            return Err(std::io::Error::last_os_error());
        }
        for word in &mut data {
            word.inheritable = 0;
        }
        if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
