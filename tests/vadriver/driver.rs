//! `mediatest`: a VA-API driver for the tests, which the real libva loads like any driver and which
//! answers from a scenario file instead of a GPU. Built by `tests/it/support/vadriver.rs` with
//! `rustc` alone (no dependencies, no headers, `-C panic=abort` so nothing unwinds into libva);
//! layouts follow libva 2.17's `va_backend.h`, which later versions only append to.
//!
//! The scenario is `$MEDIA_TESTVA_SCENARIOS/<renderDN>.scenario`, named by the file the display's
//! fd is open on (`Scenario::parse` gives the lines). `--cfg no_init_symbol` leaves out
//! `__vaDriverInit_1_0`.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::io::Write as _;
use std::sync::Mutex;

type VAStatus = c_int;
const SUCCESS: VAStatus = 0;
const ERROR_OPERATION_FAILED: VAStatus = 0x1;
const ERROR_INVALID_CONFIG: VAStatus = 0x4;
const ERROR_ATTR_NOT_SUPPORTED: VAStatus = 0xa;
const ERROR_UNSUPPORTED_PROFILE: VAStatus = 0xc;
const ERROR_UNSUPPORTED_ENTRYPOINT: VAStatus = 0xd;
const ERROR_UNIMPLEMENTED: VAStatus = 0x14;

/// Function slots of `struct VADriverVTable` before its `reserved[]` (vaTerminate … vaCopy).
const VTABLE_SLOTS: usize = 59;
const SLOT_TERMINATE: usize = 0;
const SLOT_QUERY_CONFIG_PROFILES: usize = 1;
const SLOT_QUERY_CONFIG_ENTRYPOINTS: usize = 2;
const SLOT_GET_CONFIG_ATTRIBUTES: usize = 3;
const SLOT_CREATE_CONFIG: usize = 4;
const SLOT_DESTROY_CONFIG: usize = 5;
const SLOT_QUERY_SURFACE_ATTRIBUTES: usize = 46;

/// The head of `struct VADriverContext` (va_backend.h), up to `drm_state`.
#[repr(C)]
pub struct VADriverContext {
    driver_data: *mut c_void,
    vtable: *mut *const c_void,
    vtable_glx: *mut c_void,
    vtable_egl: *mut c_void,
    vtable_tpi: *mut c_void,
    native_dpy: *mut c_void,
    x11_screen: c_int,
    version_major: c_int,
    version_minor: c_int,
    max_profiles: c_int,
    max_entrypoints: c_int,
    max_attributes: c_int,
    max_image_formats: c_int,
    max_subpic_formats: c_int,
    max_display_attributes: c_int,
    str_vendor: *const c_char,
    handle: *mut c_void,
    /// `struct drm_state *`, whose first member is `int fd`.
    drm_state: *const c_int,
}

// The x86_64 offsets of libva-facts §7, checked against va_backend.h.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::offset_of!(VADriverContext, vtable) == 8);
    assert!(std::mem::offset_of!(VADriverContext, max_profiles) == 60);
    assert!(std::mem::offset_of!(VADriverContext, str_vendor) == 88);
    assert!(std::mem::offset_of!(VADriverContext, drm_state) == 104);
};

#[repr(C)]
struct VAConfigAttrib {
    kind: c_int,
    value: u32,
}

#[repr(C)]
struct VASurfaceAttrib {
    kind: c_int,
    flags: u32,
    value_kind: c_int,
    // The union of VAGenericValue: 8 bytes, 8-aligned.
    value: u64,
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(size_of::<VASurfaceAttrib>() == 24);

unsafe extern "C" {
    fn raise(signal: c_int) -> c_int;
    fn signal(signal: c_int, handler: usize) -> usize;
    fn getpgid(pid: c_int) -> c_int;
    fn getpgrp() -> c_int;
}
const SIGSEGV: c_int = 11;
const SIG_DFL: usize = 0;

/// The RT format a config answers with.
enum Rt {
    Raw(u32),
    Error(VAStatus),
}

/// The surface formats of a config, or the call that fails.
enum Surfaces {
    Formats(Vec<u32>),
    Error { call: String, status: VAStatus },
}

#[derive(Default)]
struct Scenario {
    init: VAStatus,
    vendor: Vec<u8>,
    profiles: Vec<i32>,
    configs: Vec<(i32, i32, Option<Rt>)>,
    entrypoint_errors: Vec<(i32, VAStatus)>,
    surfaces: Vec<(i32, i32, Surfaces)>,
    null_slots: Vec<usize>,
    /// (call, how): `segv`, `abort`, `panic`, `hang`, `hang-with-helper`,
    /// `escape-then-segv`.
    act: Option<(String, String)>,
    /// Bytes to write to stderr during init.
    spew: usize,
    /// Configs created so far: the config id is the index + 1.
    created: Mutex<Vec<(i32, i32)>>,
    /// `<scenario dir>/<renderDN>.pids`: this process's id and any helper's, for the tests that
    /// check nothing outlives a killed probe.
    pid_file: Option<std::path::PathBuf>,
}

impl Scenario {
    fn note_pid(&self, what: &str, pid: u32) {
        if let Some(path) = &self.pid_file {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
            if let Ok(mut file) = file {
                let _ = writeln!(file, "{what} {pid}");
            }
        }
    }
}

fn number(word: &str) -> Result<i64, String> {
    let parsed = match word.strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16),
        None => word.parse(),
    };
    parsed.map_err(|e| format!("bad number {word:?}: {e}"))
}

fn hex_bytes(word: &str) -> Result<Vec<u8>, String> {
    if word.len() % 2 != 0 {
        return Err(format!("odd hex string {word:?}"));
    }
    (0..word.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&word[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

impl Scenario {
    /// One statement per line, numbers decimal or 0x-hex:
    /// `init STATUS` · `vendor HEX` (the vendor string's bytes) · `profile P` (listed, in order) ·
    /// `config P E [rt RAW | rt-error STATUS]` · `entrypoints-error P STATUS` ·
    /// `surfaces P E FOURCC...` · `surfaces-error P E CALL STATUS` · `null-slot N` ·
    /// `act CALL HOW` · `spew BYTES`.
    fn parse(text: &str) -> Result<Scenario, String> {
        let mut s = Scenario {
            vendor: b"mediatest".to_vec(),
            ..Scenario::default()
        };
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let n = |i: usize| -> Result<i64, String> {
                number(words.get(i).ok_or_else(|| format!("short line {line:?}"))?)
            };
            match words.first().copied() {
                None | Some("#") => {}
                Some("init") => s.init = n(1)? as VAStatus,
                Some("vendor") => s.vendor = hex_bytes(words.get(1).copied().unwrap_or(""))?,
                Some("profile") => s.profiles.push(n(1)? as i32),
                Some("config") => {
                    let rt = match words.get(3).copied() {
                        None => None,
                        Some("rt") => Some(Rt::Raw(n(4)? as u32)),
                        Some("rt-error") => Some(Rt::Error(n(4)? as VAStatus)),
                        Some(other) => return Err(format!("unknown config word {other:?}")),
                    };
                    s.configs.push((n(1)? as i32, n(2)? as i32, rt));
                }
                Some("entrypoints-error") => {
                    s.entrypoint_errors.push((n(1)? as i32, n(2)? as VAStatus))
                }
                Some("surfaces") => {
                    let formats = (3..words.len())
                        .map(|i| n(i).map(|v| v as u32))
                        .collect::<Result<_, _>>()?;
                    s.surfaces.push((n(1)? as i32, n(2)? as i32, Surfaces::Formats(formats)));
                }
                Some("surfaces-error") => {
                    let call = words.get(3).ok_or("surfaces-error needs a call")?.to_string();
                    let status = n(4)? as VAStatus;
                    s.surfaces.push((n(1)? as i32, n(2)? as i32, Surfaces::Error { call, status }));
                }
                Some("null-slot") => s.null_slots.push(n(1)? as usize),
                Some("act") => {
                    let call = words.get(1).ok_or("act needs a call")?.to_string();
                    let how = words.get(2).ok_or("act needs a way")?.to_string();
                    s.act = Some((call, how));
                }
                Some("spew") => s.spew = n(1)? as usize,
                Some(other) => return Err(format!("unknown statement {other:?}")),
            }
        }
        s.vendor.push(0);
        Ok(s)
    }

    /// Acts out the scenario's failure if it is set for `call`.
    fn act(&self, call: &str) {
        let Some((at, how)) = &self.act else { return };
        if at != call {
            return;
        }
        let _ = writeln!(std::io::stderr(), "mediatest: {how} in {call}");
        match how.as_str() {
            // The default action, as a faulting driver gets: Rust's runtime in the probe has a
            // SIGSEGV handler (for stack overflows) that returns when the signal was raised rather
            // than caused by a fault, so it is reset first.
            // SAFETY: signal and raise have no preconditions; the default action ends the process.
            "segv" => unsafe {
                signal(SIGSEGV, SIG_DFL);
                raise(SIGSEGV);
            },
            "abort" => std::process::abort(),
            // Built with panic=abort: the panic message goes to stderr, then SIGABRT.
            "panic" => panic!("mediatest panics in {call}"),
            "hang" => hang(),
            "escape-then-segv" => {
                // A helper that leaves the probe's process group (its own session), so the group
                // kill cannot reach it: it ends on its own later, re-parented to the agent, which
                // must reap it.
                if let Ok(helper) = std::process::Command::new("setsid")
                    .args(["sleep", "0.5"])
                    .spawn()
                {
                    self.note_pid("escapee", helper.id());
                    // Crash only once it has really left the group (setsid runs after the exec),
                    // or the group kill would still reach it.
                    let pid = helper.id() as c_int;
                    for _ in 0..500 {
                        // SAFETY: getpgid and getpgrp only read process attributes.
                        if unsafe { getpgid(pid) != getpgrp() } {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                }
                // SAFETY: as for "segv" above.
                unsafe {
                    signal(SIGSEGV, SIG_DFL);
                    raise(SIGSEGV);
                }
            }
            "hang-with-helper" => {
                // A helper in the probe's process group that outlives nothing: the group kill
                // must take it too.
                if let Ok(helper) = std::process::Command::new("sleep").arg("1000").spawn() {
                    self.note_pid("helper", helper.id());
                }
                hang()
            }
            other => {
                let _ = writeln!(std::io::stderr(), "mediatest: unknown act {other:?}");
            }
        }
    }
}

fn hang() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// The scenario of the render node `ctx` was opened on.
///
/// # Safety
/// `ctx` is libva's driver context of a DRM display.
unsafe fn load_scenario(ctx: *mut VADriverContext) -> Result<Scenario, String> {
    // SAFETY: libva-drm sets drm_state to its struct drm_state, whose first member is the fd.
    let fd = unsafe {
        let state = (*ctx).drm_state;
        if state.is_null() {
            return Err("no drm_state: not a DRM display".into());
        }
        *state
    };
    let node = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map_err(|e| format!("which file is fd {fd}: {e}"))?;
    let dir = std::env::var_os("MEDIA_TESTVA_SCENARIOS").ok_or("MEDIA_TESTVA_SCENARIOS is not set")?;
    let name = node.file_name().ok_or("the fd's file has no name")?;
    let path = std::path::Path::new(&dir).join(format!("{}.scenario", name.to_string_lossy()));
    let text = std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let mut scenario = Scenario::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    scenario.pid_file = Some(path.with_extension("pids"));
    Ok(scenario)
}

/// # Safety
/// `ctx` is a context this driver initialised.
unsafe fn scenario<'a>(ctx: *mut VADriverContext) -> &'a Scenario {
    // SAFETY: init stored a leaked Box<Scenario> there; vaTerminate frees it last.
    unsafe { &*(*ctx).driver_data.cast::<Scenario>() }
}

extern "C" fn unimplemented() -> VAStatus {
    ERROR_UNIMPLEMENTED
}

unsafe extern "C" fn terminate(ctx: *mut VADriverContext) -> VAStatus {
    // SAFETY: libva calls vaTerminate once, last; the Box came from init.
    unsafe {
        let data = (*ctx).driver_data;
        (*ctx).driver_data = std::ptr::null_mut();
        (*ctx).str_vendor = std::ptr::null();
        if !data.is_null() {
            let scenario = Box::from_raw(data.cast::<Scenario>());
            // The tests check that every display the probe opened was terminated.
            scenario.note_pid("terminated", std::process::id());
        }
    }
    SUCCESS
}

unsafe extern "C" fn query_config_profiles(
    ctx: *mut VADriverContext,
    list: *mut i32,
    count: *mut c_int,
) -> VAStatus {
    // SAFETY: libva passes our context and buffers of max_profiles entries.
    unsafe {
        let s = scenario(ctx);
        s.act("vaQueryConfigProfiles");
        for (i, p) in s.profiles.iter().enumerate() {
            *list.add(i) = *p;
        }
        *count = s.profiles.len() as c_int;
    }
    SUCCESS
}

unsafe extern "C" fn query_config_entrypoints(
    ctx: *mut VADriverContext,
    profile: i32,
    list: *mut i32,
    count: *mut c_int,
) -> VAStatus {
    // SAFETY: as above, with max_entrypoints entries.
    unsafe {
        let s = scenario(ctx);
        s.act("vaQueryConfigEntrypoints");
        if let Some((_, status)) = s.entrypoint_errors.iter().find(|(p, _)| *p == profile) {
            return *status;
        }
        if !s.profiles.contains(&profile) {
            return ERROR_UNSUPPORTED_PROFILE;
        }
        let mut n = 0;
        for (p, e, _) in &s.configs {
            if *p == profile {
                *list.add(n) = *e;
                n += 1;
            }
        }
        *count = n as c_int;
    }
    SUCCESS
}

unsafe extern "C" fn get_config_attributes(
    ctx: *mut VADriverContext,
    profile: i32,
    entrypoint: i32,
    list: *mut VAConfigAttrib,
    count: c_int,
) -> VAStatus {
    // SAFETY: libva passes our context and `count` attributes.
    unsafe {
        let s = scenario(ctx);
        s.act("vaGetConfigAttributes");
        let Some((_, _, rt)) = s.configs.iter().find(|(p, e, _)| (*p, *e) == (profile, entrypoint))
        else {
            return ERROR_UNSUPPORTED_ENTRYPOINT;
        };
        for i in 0..count.max(0) as usize {
            let attrib = &mut *list.add(i);
            attrib.value = match (attrib.kind, rt) {
                (0, Some(Rt::Raw(raw))) => *raw,
                (0, Some(Rt::Error(status))) => return *status,
                // The record did not say: a driver that cannot answer.
                (0, None) => return ERROR_ATTR_NOT_SUPPORTED,
                _ => 0x8000_0000,
            };
        }
    }
    SUCCESS
}

fn surfaces_of(s: &Scenario, profile: i32, entrypoint: i32) -> Option<&Surfaces> {
    s.surfaces
        .iter()
        .find(|(p, e, _)| (*p, *e) == (profile, entrypoint))
        .map(|(_, _, surfaces)| surfaces)
}

unsafe extern "C" fn create_config(
    ctx: *mut VADriverContext,
    profile: i32,
    entrypoint: i32,
    _attribs: *mut VAConfigAttrib,
    _count: c_int,
    config: *mut c_uint,
) -> VAStatus {
    // SAFETY: our context and a valid out-pointer.
    unsafe {
        let s = scenario(ctx);
        s.act("vaCreateConfig");
        if !s.configs.iter().any(|(p, e, _)| (*p, *e) == (profile, entrypoint)) {
            return ERROR_UNSUPPORTED_ENTRYPOINT;
        }
        if let Some(Surfaces::Error { call, status }) = surfaces_of(s, profile, entrypoint) {
            if call == "vaCreateConfig" {
                return *status;
            }
        }
        let mut created = s.created.lock().unwrap_or_else(|e| e.into_inner());
        created.push((profile, entrypoint));
        *config = created.len() as c_uint;
    }
    SUCCESS
}

unsafe extern "C" fn destroy_config(ctx: *mut VADriverContext, config: c_uint) -> VAStatus {
    // SAFETY: our context.
    let s = unsafe { scenario(ctx) };
    let created = s.created.lock().unwrap_or_else(|e| e.into_inner());
    if config == 0 || config as usize > created.len() {
        return ERROR_INVALID_CONFIG;
    }
    SUCCESS
}

unsafe extern "C" fn query_surface_attributes(
    ctx: *mut VADriverContext,
    config: c_uint,
    list: *mut VASurfaceAttrib,
    count: *mut c_uint,
) -> VAStatus {
    // SAFETY: our context; `list` null or `*count` entries.
    unsafe {
        let s = scenario(ctx);
        s.act("vaQuerySurfaceAttributes");
        let pair = {
            let created = s.created.lock().unwrap_or_else(|e| e.into_inner());
            match (config as usize).checked_sub(1).and_then(|i| created.get(i)) {
                Some(pair) => *pair,
                None => return ERROR_INVALID_CONFIG,
            }
        };
        let formats: &[u32] = match surfaces_of(s, pair.0, pair.1) {
            Some(Surfaces::Formats(formats)) => formats,
            Some(Surfaces::Error { call, status }) if call == "vaQuerySurfaceAttributes" => {
                return *status;
            }
            // Not recorded: a driver that lists no pixel formats.
            _ => &[],
        };
        if list.is_null() {
            *count = formats.len() as c_uint;
            return SUCCESS;
        }
        if (*count as usize) < formats.len() {
            return 0x25; // VA_STATUS_ERROR_NOT_ENOUGH_BUFFER
        }
        for (i, fourcc) in formats.iter().enumerate() {
            *list.add(i) = VASurfaceAttrib {
                kind: 1,        // VASurfaceAttribPixelFormat
                flags: 1 | 2,   // GETTABLE | SETTABLE, as drivers set them
                value_kind: 1,  // VAGenericValueTypeInteger
                value: u64::from(*fourcc),
            };
        }
        *count = formats.len() as c_uint;
    }
    SUCCESS
}

/// Writes `bytes` of stderr in lines (the last with a byte that is not UTF-8), like a driver with
/// its debug output left on.
fn spew(bytes: usize) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(b"mediatest: spewing\n");
    let line = [b'x'; 99];
    let mut written = 0;
    while written < bytes {
        if err.write_all(&line).and_then(|()| err.write_all(b"\n")).is_err() {
            return;
        }
        written += line.len() + 1;
    }
    let _ = err.write_all(b"mediatest: spewed, and one byte that is not UTF-8: \xff\n");
    let _ = err.flush();
}

/// The entry point libva looks for (`__vaDriverInit_1_0`, the oldest it accepts).
///
/// # Safety
/// libva calls it with a fresh driver context whose vtable it allocated.
#[cfg(not(no_init_symbol))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __vaDriverInit_1_0(ctx: *mut VADriverContext) -> VAStatus {
    // SAFETY: see the function's contract; every write stays inside libva's structs.
    unsafe { init(ctx) }
}

/// # Safety
/// As `__vaDriverInit_1_0`.
#[cfg_attr(no_init_symbol, allow(dead_code))]
unsafe fn init(ctx: *mut VADriverContext) -> VAStatus {
    // SAFETY: per the contract.
    let scenario = match unsafe { load_scenario(ctx) } {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "mediatest: {e}");
            return ERROR_OPERATION_FAILED;
        }
    };
    scenario.note_pid("probe", std::process::id());
    if scenario.spew > 0 {
        spew(scenario.spew);
    }
    scenario.act("init");
    if scenario.init != SUCCESS {
        return scenario.init;
    }
    let slots: [(usize, *const c_void); 7] = [
        (SLOT_TERMINATE, terminate as *const c_void),
        (SLOT_QUERY_CONFIG_PROFILES, query_config_profiles as *const c_void),
        (SLOT_QUERY_CONFIG_ENTRYPOINTS, query_config_entrypoints as *const c_void),
        (SLOT_GET_CONFIG_ATTRIBUTES, get_config_attributes as *const c_void),
        (SLOT_CREATE_CONFIG, create_config as *const c_void),
        (SLOT_DESTROY_CONFIG, destroy_config as *const c_void),
        (SLOT_QUERY_SURFACE_ATTRIBUTES, query_surface_attributes as *const c_void),
    ];
    // SAFETY: libva allocated the vtable (59 slots and reserved space) before calling init.
    unsafe {
        let vtable = (*ctx).vtable;
        for i in 0..VTABLE_SLOTS {
            *vtable.add(i) = unimplemented as *const c_void;
        }
        for (slot, f) in slots {
            *vtable.add(slot) = f;
        }
        for slot in &scenario.null_slots {
            *vtable.add(*slot) = std::ptr::null();
        }
        (*ctx).max_profiles = 64;
        (*ctx).max_entrypoints = 16;
        (*ctx).max_attributes = 8;
        (*ctx).max_image_formats = 1;
        (*ctx).max_subpic_formats = 1;
        (*ctx).max_display_attributes = 1;
        let scenario = Box::into_raw(Box::new(scenario));
        (*ctx).str_vendor = (*scenario).vendor.as_ptr().cast();
        (*ctx).driver_data = scenario.cast();
    }
    SUCCESS
}
