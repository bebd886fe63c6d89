//! The tests' stand-in for the two libdrm calls libva-drm makes on a display's fd, preloaded into
//! the tests' probe processes only (libva-facts §7). The fake render nodes are plain files, so
//! every fd is a render node here, and its kernel driver is the one the fake sysfs names
//! (`$MEDIA_TESTVA_SYS/class/drm/<renderDN>/device/uevent`, or `<renderDN>/mediatest-drm-name`
//! where the DRM driver's name differs): libva's own mapping then picks the driver file, as on a
//! node with that GPU.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void};
use std::io::Write as _;

unsafe extern "C" {
    fn malloc(size: usize) -> *mut c_void;
    fn free(ptr: *mut c_void);
}

/// `drmVersion` (xf86drm.h).
#[repr(C)]
pub struct DrmVersion {
    version_major: c_int,
    version_minor: c_int,
    version_patchlevel: c_int,
    name_len: c_int,
    name: *mut c_char,
    date_len: c_int,
    date: *mut c_char,
    desc_len: c_int,
    desc: *mut c_char,
}

/// `DRM_NODE_RENDER`.
#[unsafe(no_mangle)]
pub extern "C" fn drmGetNodeTypeFromFd(_fd: c_int) -> c_int {
    2
}

fn kernel_driver(fd: c_int) -> Result<String, String> {
    let node = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map_err(|e| format!("which file is fd {fd}: {e}"))?;
    let sys = std::env::var_os("MEDIA_TESTVA_SYS").ok_or("MEDIA_TESTVA_SYS is not set")?;
    let name = node.file_name().ok_or("the fd's file has no name")?;
    let class = std::path::Path::new(&sys).join("class/drm").join(name);
    // The DRM driver's own name where it is not the PCI driver's (the kernel's `nvidia-drm`
    // serves GPUs bound to `nvidia`); sysfs does not show it, so the fake tree states it.
    if let Ok(drm_name) = std::fs::read_to_string(class.join("mediatest-drm-name")) {
        return Ok(drm_name.trim().to_string());
    }
    let uevent = class.join("device/uevent");
    let text =
        std::fs::read_to_string(&uevent).map_err(|e| format!("read {}: {e}", uevent.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("DRIVER="))
        .map(|d| d.trim().to_string())
        .ok_or_else(|| format!("no DRIVER= in {}", uevent.display()))
}

/// A malloc'd NUL-terminated copy of `text`, as libdrm returns its strings.
fn c_string(text: &str) -> *mut c_char {
    // SAFETY: malloc has no preconditions; the copy stays within the len + 1 bytes allocated.
    unsafe {
        let p = malloc(text.len() + 1).cast::<u8>();
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(text.as_ptr(), p, text.len());
            *p.add(text.len()) = 0;
        }
        p.cast()
    }
}

/// The fd's "kernel driver", from the fake sysfs tree; NULL (as libdrm on a non-DRM fd) when the
/// tree does not say.
#[unsafe(no_mangle)]
pub extern "C" fn drmGetVersion(fd: c_int) -> *mut DrmVersion {
    let name = match kernel_driver(fd) {
        Ok(name) => name,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "mediatest drm shim: {e}");
            return std::ptr::null_mut();
        }
    };
    // SAFETY: a fresh allocation of the struct's size, every field written before it is returned.
    unsafe {
        let v = malloc(size_of::<DrmVersion>()).cast::<DrmVersion>();
        if v.is_null() {
            return v;
        }
        v.write(DrmVersion {
            version_major: 1,
            version_minor: 0,
            version_patchlevel: 0,
            name_len: name.len() as c_int,
            name: c_string(&name),
            date_len: 8,
            date: c_string("20260101"),
            desc_len: 9,
            desc: c_string("mediatest"),
        });
        v
    }
}

/// Frees what `drmGetVersion` returned.
///
/// # Safety
/// `v` is null or came from this library's `drmGetVersion`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn drmFreeVersion(v: *mut DrmVersion) {
    if v.is_null() {
        return;
    }
    // SAFETY: every pointer was malloc'd by drmGetVersion above.
    unsafe {
        free((*v).name.cast());
        free((*v).date.cast());
        free((*v).desc.cast());
        free(v.cast());
    }
}
