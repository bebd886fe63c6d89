//! The raw libva interface, loaded at run time, and the only unsafe code in the crate. libva is
//! opened with `libloading`, never linked: both programs build without it, and a node without it
//! gets the loader's error as its probe failure. Declarations follow va.h and va_drm.h.
//!
//! Above this module: a `Libva`, a `Display` that terminates and closes its fd when dropped, and
//! `VaError`, made from a `VAStatus` only in `Libva::check`. A display is a typestate: queries
//! exist only on `Display<Initialised>`. Every unsafe block carries its `SAFETY:` comment.

#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
#![deny(unsafe_op_in_unsafe_fn)]

use super::report::{Level, Message};
use libloading::Library;
use std::error::Error as _;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::fs::OpenOptions;
use std::io::Write as _;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

type VADisplay = *mut c_void;
type VAStatus = c_int;
type VAConfigID = c_uint;
type VAMessageCallback = Option<unsafe extern "C" fn(ctx: *mut c_void, message: *const c_char)>;

/// `VA_STATUS_ERROR_UNSUPPORTED_PROFILE`: a listed profile that has no entrypoints after all.
pub(crate) const STATUS_UNSUPPORTED_PROFILE: i32 = 0xc;
/// `VAConfigAttribRTFormat`.
const CONFIG_ATTRIB_RT_FORMAT: c_int = 0;
/// `VASurfaceAttribPixelFormat`.
const SURFACE_ATTRIB_PIXEL_FORMAT: c_int = 1;
/// `VAGenericValueTypeInteger`.
const GENERIC_VALUE_TYPE_INTEGER: c_int = 1;

#[repr(C)]
struct VAConfigAttrib {
    kind: c_int,
    value: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
union VAGenericValueUnion {
    i: i32,
    f: f32,
    p: *mut c_void,
    func: Option<unsafe extern "C" fn()>,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct VAGenericValue {
    kind: c_int,
    value: VAGenericValueUnion,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct VASurfaceAttrib {
    kind: c_int,
    flags: u32,
    value: VAGenericValue,
}

// The x86_64 layouts of va.h's VAConfigAttrib and VASurfaceAttrib; a wrong size would make libva write past our buffers.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<VAConfigAttrib>() == 8);
    assert!(size_of::<VASurfaceAttrib>() == 24);
};

/// A failed libva call: which call, the status and `vaErrorStr`'s words for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {text} ({})", status_code(*.status))]
pub(crate) struct VaError {
    pub call: &'static str,
    pub status: i32,
    pub text: String,
}

fn status_code(status: i32) -> String {
    // libva's own statuses are small positive hex codes; -1 is "unknown libva error".
    if status < 0 {
        status.to_string()
    } else {
        format!("{status:#x}")
    }
}

/// Why libva or a display could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// The loader's own words (`dlopen failed: libva.so.2: cannot open shared object file: ...`).
    #[error("{0}")]
    Load(String),
    #[error("open {path}: {source}")]
    Node {
        path: String,
        source: std::io::Error,
    },
    #[error("vaGetDisplayDRM returned no display for {0} (hint: is it a DRM render node?)")]
    NoDisplay(String),
    #[error("invalid VA driver name {0:?}: it contains a NUL byte")]
    DriverName(String),
    #[error(
        "{0} has no vaSetDriverName, needed for the VA driver override (hint: libva 2.6 or newer has it)"
    )]
    NoSetDriverName(String),
    #[error(transparent)]
    SetDriverName(VaError),
}

/// The loader error with its cause, since libloading keeps dlerror's text in the source.
fn loader_error(err: &libloading::Error) -> String {
    match err.source() {
        Some(source) => format!("{err}: {source}"),
        None => err.to_string(),
    }
}

/// Where to load libva from; the sonames by default, any path for tests and odd installs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibvaPaths {
    pub va: String,
    pub va_drm: String,
}

impl Default for LibvaPaths {
    fn default() -> Self {
        LibvaPaths {
            va: "libva.so.2".into(),
            va_drm: "libva-drm.so.2".into(),
        }
    }
}

/// The entry points we call, copied out of the loaded libraries.
struct Api {
    get_display_drm: unsafe extern "C" fn(c_int) -> VADisplay,
    set_error_callback:
        unsafe extern "C" fn(VADisplay, VAMessageCallback, *mut c_void) -> VAMessageCallback,
    set_info_callback:
        unsafe extern "C" fn(VADisplay, VAMessageCallback, *mut c_void) -> VAMessageCallback,
    set_driver_name: Option<unsafe extern "C" fn(VADisplay, *mut c_char) -> VAStatus>,
    initialize: unsafe extern "C" fn(VADisplay, *mut c_int, *mut c_int) -> VAStatus,
    terminate: unsafe extern "C" fn(VADisplay) -> VAStatus,
    query_vendor_string: unsafe extern "C" fn(VADisplay) -> *const c_char,
    max_num_profiles: unsafe extern "C" fn(VADisplay) -> c_int,
    query_config_profiles: unsafe extern "C" fn(VADisplay, *mut c_int, *mut c_int) -> VAStatus,
    max_num_entrypoints: unsafe extern "C" fn(VADisplay) -> c_int,
    query_config_entrypoints:
        unsafe extern "C" fn(VADisplay, c_int, *mut c_int, *mut c_int) -> VAStatus,
    get_config_attributes:
        unsafe extern "C" fn(VADisplay, c_int, c_int, *mut VAConfigAttrib, c_int) -> VAStatus,
    create_config: unsafe extern "C" fn(
        VADisplay,
        c_int,
        c_int,
        *mut VAConfigAttrib,
        c_int,
        *mut VAConfigID,
    ) -> VAStatus,
    destroy_config: unsafe extern "C" fn(VADisplay, VAConfigID) -> VAStatus,
    query_surface_attributes:
        unsafe extern "C" fn(VADisplay, VAConfigID, *mut VASurfaceAttrib, *mut c_uint) -> VAStatus,
    error_str: unsafe extern "C" fn(VAStatus) -> *const c_char,
}

/// libva and libva-drm, loaded. The function pointers in `api` stay valid because the libraries
/// are kept open for as long as this value lives.
pub(crate) struct Libva {
    api: Api,
    /// What libva was loaded as, for messages.
    soname: String,
    _va: Library,
    _va_drm: Library,
}

/// Copies one symbol's address out of `lib` as a function pointer of type `T`.
///
/// # Safety
/// `T` must be the exact C signature of `name` in the loaded library, and the pointer must not be
/// used after `lib` is closed.
unsafe fn symbol<T: Copy>(lib: &Library, soname: &str, name: &str) -> Result<T, OpenError> {
    // SAFETY: the caller guarantees `T` matches the symbol's C type; copying the pointer out is
    // sound as long as the library stays loaded, which `Libva` ensures by owning it.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| OpenError::Load(format!("{soname} has no {name}: {}", loader_error(&e))))
}

impl Libva {
    /// Loads libva and libva-drm. Loading runs their initialisers, nothing more; no driver is
    /// loaded until a display is initialised.
    pub(crate) fn load(paths: &LibvaPaths) -> Result<Libva, OpenError> {
        // SAFETY: libva's and libva-drm's initialisers have no preconditions; we load them once
        // per probe process, which exists only to call them.
        let va =
            unsafe { Library::new(&paths.va) }.map_err(|e| OpenError::Load(loader_error(&e)))?;
        // SAFETY: as above.
        let va_drm = unsafe { Library::new(&paths.va_drm) }
            .map_err(|e| OpenError::Load(loader_error(&e)))?;
        let (v, d) = (paths.va.as_str(), paths.va_drm.as_str());
        // SAFETY: for every `symbol` call below, each type is the signature from va.h /
        // va_drm.h (intel/libva), and `Libva` keeps both libraries open while `api` is in use.
        let api = unsafe {
            Api {
                get_display_drm: symbol(&va_drm, d, "vaGetDisplayDRM")?,
                set_error_callback: symbol(&va, v, "vaSetErrorCallback")?,
                set_info_callback: symbol(&va, v, "vaSetInfoCallback")?,
                set_driver_name: symbol(&va, v, "vaSetDriverName").ok(),
                initialize: symbol(&va, v, "vaInitialize")?,
                terminate: symbol(&va, v, "vaTerminate")?,
                query_vendor_string: symbol(&va, v, "vaQueryVendorString")?,
                max_num_profiles: symbol(&va, v, "vaMaxNumProfiles")?,
                query_config_profiles: symbol(&va, v, "vaQueryConfigProfiles")?,
                max_num_entrypoints: symbol(&va, v, "vaMaxNumEntrypoints")?,
                query_config_entrypoints: symbol(&va, v, "vaQueryConfigEntrypoints")?,
                get_config_attributes: symbol(&va, v, "vaGetConfigAttributes")?,
                create_config: symbol(&va, v, "vaCreateConfig")?,
                destroy_config: symbol(&va, v, "vaDestroyConfig")?,
                query_surface_attributes: symbol(&va, v, "vaQuerySurfaceAttributes")?,
                error_str: symbol(&va, v, "vaErrorStr")?,
            }
        };
        Ok(Libva {
            api,
            soname: paths.va.clone(),
            _va: va,
            _va_drm: va_drm,
        })
    }

    /// The one place a `VAStatus` becomes a Rust error.
    fn check(&self, call: &'static str, status: VAStatus) -> Result<(), VaError> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: vaErrorStr accepts any status and returns a pointer to a static string.
        let text = unsafe { (self.api.error_str)(status) };
        let text = if text.is_null() {
            String::from("(no text)")
        } else {
            // SAFETY: non-null, NUL-terminated, static storage (libva's string table).
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Err(VaError { call, status, text })
    }

    /// Opens `node`, gets a DRM display for it and sets the message callbacks, in that order, so
    /// every message from `vaInitialize` on is captured. With `driver`, the display will load that
    /// VA driver instead of the one libva would choose for the node's kernel driver.
    pub(crate) fn open_display(
        &self,
        node: &Path,
        driver: Option<&str>,
        echo_messages: bool,
    ) -> Result<Display<'_, Opened>, OpenError> {
        let path = node.display().to_string();
        // Render nodes need no DRM authentication; std opens with O_CLOEXEC.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(node)
            .map_err(|source| OpenError::Node {
                path: path.clone(),
                source,
            })?;
        let fd = OwnedFd::from(file);
        // SAFETY: `fd` is an open descriptor that outlives the display (the handle owns it and
        // terminates the display before the fd is closed).
        let dpy = unsafe { (self.api.get_display_drm)(fd.as_raw_fd()) };
        if dpy.is_null() {
            return Err(OpenError::NoDisplay(path));
        }
        // Owned by the handle from here on: freed in its Drop, after vaTerminate.
        let sink = Box::into_raw(Box::new(Sink {
            messages: Mutex::new(Vec::new()),
            echo: echo_messages,
        }));
        let handle = Handle {
            lib: self,
            dpy,
            sink,
            _fd: fd,
        };
        // SAFETY: `dpy` is a valid display; the callbacks never unwind (see `on_message`) and
        // `sink` stays allocated until after vaTerminate (Handle::drop).
        unsafe {
            (self.api.set_error_callback)(dpy, Some(on_error), sink.cast());
            (self.api.set_info_callback)(dpy, Some(on_info), sink.cast());
        }
        if let Some(name) = driver {
            let set = self
                .api
                .set_driver_name
                .ok_or_else(|| OpenError::NoSetDriverName(self.soname.clone()))?;
            let name_c = CString::new(name).map_err(|_| OpenError::DriverName(name.to_string()))?;
            // SAFETY: valid display and NUL-terminated string; libva copies the name (strdup),
            // so `name_c` may be freed afterwards.
            let status = unsafe { set(dpy, name_c.as_ptr().cast_mut()) };
            self.check("vaSetDriverName", status)
                .map_err(OpenError::SetDriverName)?;
        }
        Ok(Display {
            handle,
            _state: PhantomData,
        })
    }
}

/// Where the callbacks put libva's messages.
struct Sink {
    messages: Mutex<Vec<Message>>,
    /// Also write each message to stderr as it arrives, so a parent process still has them if the
    /// driver crashes this process before the report is printed.
    echo: bool,
}

/// # Safety
/// Called by libva only, with the context registered in `open_display`.
unsafe extern "C" fn on_error(ctx: *mut c_void, message: *const c_char) {
    // SAFETY: libva passes back the ctx we registered and a NUL-terminated message.
    unsafe { on_message(ctx, message, Level::Error) }
}

/// # Safety
/// As `on_error`.
unsafe extern "C" fn on_info(ctx: *mut c_void, message: *const c_char) {
    // SAFETY: as above.
    unsafe { on_message(ctx, message, Level::Info) }
}

/// # Safety
/// `ctx` must be the `Sink` registered in `open_display`, still alive; `message` null or a
/// NUL-terminated string.
unsafe fn on_message(ctx: *mut c_void, message: *const c_char, level: Level) {
    if ctx.is_null() || message.is_null() {
        return;
    }
    // SAFETY: per this function's contract.
    let sink = unsafe { &*ctx.cast::<Sink>() };
    // SAFETY: per this function's contract.
    let text = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    // libva's messages end in a newline; the text is otherwise kept as it is.
    let message = Message {
        level,
        text: text.strip_suffix('\n').unwrap_or(&text).to_string(),
    };
    // A panic must not unwind into C: catch it and drop the message rather than abort the probe.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if sink.echo {
            let _ = writeln!(std::io::stderr().lock(), "{message}");
        }
        if let Ok(mut messages) = sink.messages.lock() {
            messages.push(message);
        }
    }));
}

/// What a display owns, in either state: the display, the callbacks' context and the node's fd.
/// Dropping it calls `vaTerminate`, then frees the context, then closes the fd (libva never
/// closes it itself), on every path.
struct Handle<'a> {
    lib: &'a Libva,
    /// Null once terminated.
    dpy: VADisplay,
    /// From `Box::into_raw`; freed in `drop`, after vaTerminate.
    sink: *mut Sink,
    // Declared last: closed after `drop` has terminated the display.
    _fd: OwnedFd,
}

impl Handle<'_> {
    fn sink(&self) -> &Sink {
        // SAFETY: `sink` came from Box::into_raw in open_display and is freed only in drop.
        unsafe { &*self.sink }
    }

    fn terminate(&mut self) {
        if !self.dpy.is_null() {
            // SAFETY: `dpy` came from vaGetDisplayDRM and is terminated exactly once (it is
            // nulled here); libva allows vaTerminate after a failed vaInitialize.
            unsafe { (self.lib.api.terminate)(self.dpy) };
            self.dpy = std::ptr::null_mut();
        }
    }

    fn take_messages(&self) -> Vec<Message> {
        self.sink()
            .messages
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default()
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        self.terminate();
        // SAFETY: from Box::into_raw, freed once here; libva can no longer call back into it
        // because the display is terminated.
        drop(unsafe { Box::from_raw(self.sink) });
        // The fd is closed afterwards, when `_fd` drops.
    }
}

/// A display libva has not initialised: the only thing to do with it is `initialize`.
pub(crate) struct Opened;
/// A display whose VA driver is loaded and initialised: the queries live here.
pub(crate) struct Initialised;

/// An open VA display on one render node, in state `Opened` or `Initialised`.
pub(crate) struct Display<'a, State> {
    handle: Handle<'a>,
    _state: PhantomData<State>,
}

/// `vaInitialize` failed: the error, and every message libva sent up to its `vaTerminate`.
#[derive(Debug)]
pub(crate) struct InitFailed {
    pub error: VaError,
    pub messages: Vec<Message>,
}

impl<'a> Display<'a, Opened> {
    /// `vaInitialize`: loads and initialises the VA driver. Returns the initialised display and
    /// the VA-API version; on failure the display is terminated and its messages returned.
    pub(crate) fn initialize(
        mut self,
    ) -> Result<(Display<'a, Initialised>, (i32, i32)), InitFailed> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: valid, not yet initialised display; valid out-pointers.
        let status =
            unsafe { (self.handle.lib.api.initialize)(self.handle.dpy, &mut major, &mut minor) };
        match self.handle.lib.check("vaInitialize", status) {
            Ok(()) => Ok((
                Display {
                    handle: self.handle,
                    _state: PhantomData,
                },
                (major, minor),
            )),
            Err(error) => {
                self.handle.terminate();
                Err(InitFailed {
                    error,
                    messages: self.handle.take_messages(),
                })
            }
        }
    }
}

impl<State> Display<'_, State> {
    /// Terminates the display now and returns every message, including those `vaTerminate`
    /// itself produced. The callbacks' context is freed and the fd closed as `self` drops.
    pub(crate) fn terminate(mut self) -> Vec<Message> {
        self.handle.terminate();
        self.handle.take_messages()
    }
}

impl Display<'_, Initialised> {
    fn lib(&self) -> &Libva {
        self.handle.lib
    }

    fn dpy(&self) -> VADisplay {
        self.handle.dpy
    }

    /// `vaQueryVendorString`, copied at once (the pointer belongs to the driver).
    pub(crate) fn vendor(&self) -> Option<String> {
        // SAFETY: initialised display.
        let text = unsafe { (self.lib().api.query_vendor_string)(self.dpy()) };
        (!text.is_null()).then(|| {
            // SAFETY: non-null strings from libva are NUL-terminated and live until vaTerminate.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        })
    }

    /// `vaQueryConfigProfiles`, with a buffer of at least 64 entries and the count checked.
    pub(crate) fn profiles(&self) -> Result<Vec<i32>, VaError> {
        // SAFETY: initialised display.
        let max = unsafe { (self.lib().api.max_num_profiles)(self.dpy()) };
        let mut list = vec![0; usize::try_from(max).unwrap_or(0).max(64)];
        let mut count: c_int = 0;
        // SAFETY: `list` has room for vaMaxNumProfiles entries (and more).
        let status = unsafe {
            (self.lib().api.query_config_profiles)(self.dpy(), list.as_mut_ptr(), &mut count)
        };
        self.lib().check("vaQueryConfigProfiles", status)?;
        list.truncate(usize::try_from(count).unwrap_or(0).min(list.len()));
        Ok(list)
    }

    /// `vaQueryConfigEntrypoints` for one profile.
    pub(crate) fn entrypoints(&self, profile: i32) -> Result<Vec<i32>, VaError> {
        // SAFETY: initialised display.
        let max = unsafe { (self.lib().api.max_num_entrypoints)(self.dpy()) };
        let mut list = vec![0; usize::try_from(max).unwrap_or(0).max(64)];
        let mut count: c_int = 0;
        // SAFETY: `list` has room for vaMaxNumEntrypoints entries (and more).
        let status = unsafe {
            (self.lib().api.query_config_entrypoints)(
                self.dpy(),
                profile,
                list.as_mut_ptr(),
                &mut count,
            )
        };
        self.lib().check("vaQueryConfigEntrypoints", status)?;
        list.truncate(usize::try_from(count).unwrap_or(0).min(list.len()));
        Ok(list)
    }

    /// The raw `VAConfigAttribRTFormat` value of (profile, entrypoint).
    pub(crate) fn rt_format(&self, profile: i32, entrypoint: i32) -> Result<u32, VaError> {
        let mut attrib = VAConfigAttrib {
            kind: CONFIG_ATTRIB_RT_FORMAT,
            value: 0,
        };
        // SAFETY: one attribute, one entry in the array.
        let status = unsafe {
            (self.lib().api.get_config_attributes)(self.dpy(), profile, entrypoint, &mut attrib, 1)
        };
        self.lib().check("vaGetConfigAttributes", status)?;
        Ok(attrib.value)
    }

    /// The pixel formats `vaQuerySurfaceAttributes` lists for a config of (profile, entrypoint).
    /// The config is created for the query and destroyed afterwards, also on failure.
    pub(crate) fn surface_formats(
        &self,
        profile: i32,
        entrypoint: i32,
    ) -> Result<Vec<u32>, VaError> {
        let mut config: VAConfigID = 0;
        // SAFETY: no attributes (null list, count 0) and a valid out-pointer.
        let status = unsafe {
            (self.lib().api.create_config)(
                self.dpy(),
                profile,
                entrypoint,
                std::ptr::null_mut(),
                0,
                &mut config,
            )
        };
        self.lib().check("vaCreateConfig", status)?;
        let formats = self.query_surface_formats(config);
        // SAFETY: `config` was created above and is destroyed exactly once.
        let status = unsafe { (self.lib().api.destroy_config)(self.dpy(), config) };
        let destroyed = self.lib().check("vaDestroyConfig", status);
        let formats = formats?;
        destroyed?;
        Ok(formats)
    }

    fn query_surface_formats(&self, config: VAConfigID) -> Result<Vec<u32>, VaError> {
        let mut count: c_uint = 0;
        // SAFETY: a null list asks only for the count.
        let status = unsafe {
            (self.lib().api.query_surface_attributes)(
                self.dpy(),
                config,
                std::ptr::null_mut(),
                &mut count,
            )
        };
        self.lib().check("vaQuerySurfaceAttributes", status)?;
        let empty = VASurfaceAttrib {
            kind: 0,
            flags: 0,
            value: VAGenericValue {
                kind: 0,
                value: VAGenericValueUnion { i: 0 },
            },
        };
        let mut list = vec![empty; count as usize];
        // SAFETY: `list` holds `count` entries, the number libva asked for.
        let status = unsafe {
            (self.lib().api.query_surface_attributes)(
                self.dpy(),
                config,
                list.as_mut_ptr(),
                &mut count,
            )
        };
        self.lib().check("vaQuerySurfaceAttributes", status)?;
        list.truncate(count as usize);
        Ok(list
            .iter()
            .filter(|a| {
                a.kind == SURFACE_ATTRIB_PIXEL_FORMAT && a.value.kind == GENERIC_VALUE_TYPE_INTEGER
            })
            // SAFETY: the value's type tag says the union holds an integer.
            .map(|a| unsafe { a.value.value.i } as u32)
            .collect())
    }
}
