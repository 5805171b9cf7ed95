//! nftables through libnftables, the library behind the `nft` command, loaded at run time.
//!
//! In process, one command is one netlink transaction of a few hundred microseconds, where
//! spawning `nft` costs milliseconds; the library is opened with dlopen, so probed neither
//! links against it nor needs it unless an nftables sink is configured or the conntrack
//! exemption (`kernel::notrack`) is to be installed (Debian: libnftables1,
//! which the nftables package pulls in). Commands are nft's own language, and a buffer of
//! several commands is one atomic transaction.
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

/// `NFT_CTX_OUTPUT_JSON` of libnftables.h: listings come back as JSON.
const OUTPUT_JSON: c_uint = 1 << 4;
const LIBRARY: &CStr = c"libnftables.so.1";

#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("cannot load libnftables.so.1 ({0}): install Debian's libnftables1 (the nftables package brings it)")]
    Library(String),
    #[error("libnftables could not create a context")]
    Context,
    #[error("nft: {0}")]
    Command(String),
}

type CtxNew = unsafe extern "C" fn(u32) -> *mut c_void;
type CtxFree = unsafe extern "C" fn(*mut c_void);
type CtxInt = unsafe extern "C" fn(*mut c_void) -> c_int;
type CtxBuffer = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type SetFlags = unsafe extern "C" fn(*mut c_void, c_uint);
type Run = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;

/// One libnftables context: its commands run in the network namespace of the thread that
/// calls them.
pub struct Nft {
    lib: *mut c_void,
    ctx: *mut c_void,
    free: CtxFree,
    output: CtxBuffer,
    error: CtxBuffer,
    set_flags: SetFlags,
    run: Run,
}

// SAFETY: an nft_ctx is plain heap memory with no thread affinity; `Nft` is only ever used by
// one thread at a time (it is not Sync), which is all libnftables asks.
unsafe impl Send for Nft {}

impl Nft {
    pub fn open() -> Result<Nft, NftError> {
        // SAFETY: dlopen with a valid C string; the handle is checked before use.
        let lib = unsafe { libc::dlopen(LIBRARY.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return Err(NftError::Library(last_dl_error()));
        }
        let symbols = (|| {
            // SAFETY: each symbol is looked up in the library just opened and transmuted to
            // the signature libnftables.h declares for it.
            unsafe {
                Some((
                    sym::<CtxNew>(lib, c"nft_ctx_new")?,
                    sym::<CtxFree>(lib, c"nft_ctx_free")?,
                    sym::<CtxInt>(lib, c"nft_ctx_buffer_output")?,
                    sym::<CtxInt>(lib, c"nft_ctx_buffer_error")?,
                    sym::<CtxBuffer>(lib, c"nft_ctx_get_output_buffer")?,
                    sym::<CtxBuffer>(lib, c"nft_ctx_get_error_buffer")?,
                    sym::<SetFlags>(lib, c"nft_ctx_output_set_flags")?,
                    sym::<Run>(lib, c"nft_run_cmd_from_buffer")?,
                ))
            }
        })();
        let Some((new, free, buffer_output, buffer_error, output, error, set_flags, run)) = symbols else {
            let why = last_dl_error();
            // SAFETY: `lib` came from dlopen above and nothing from it is in use.
            unsafe { libc::dlclose(lib) };
            return Err(NftError::Library(why));
        };
        // SAFETY: the functions have their declared signatures; NFT_CTX_DEFAULT is 0.
        let ctx = unsafe { new(0) };
        if ctx.is_null() {
            // SAFETY: as above.
            unsafe { libc::dlclose(lib) };
            return Err(NftError::Context);
        }
        // SAFETY: `ctx` is a live context; buffering makes output and errors readable below
        // instead of printed.
        unsafe {
            buffer_output(ctx);
            buffer_error(ctx);
        }
        Ok(Nft {
            lib,
            ctx,
            free,
            output,
            error,
            set_flags,
            run,
        })
    }

    /// Runs `commands` (one transaction); returns what they printed.
    pub fn run(&mut self, commands: &str) -> Result<String, NftError> {
        self.run_with(commands, 0)
    }

    /// Runs a listing command; returns its JSON.
    pub fn list_json(&mut self, command: &str) -> Result<String, NftError> {
        self.run_with(command, OUTPUT_JSON)
    }

    fn run_with(&mut self, commands: &str, flags: c_uint) -> Result<String, NftError> {
        let text = CString::new(commands).map_err(|_| NftError::Command("a command holds a NUL byte".into()))?;
        // SAFETY: `ctx` is live for as long as `self`; the buffers libnftables returns are
        // NUL-terminated and valid until the next command, and are copied out before it.
        unsafe {
            (self.set_flags)(self.ctx, flags);
            let rc = (self.run)(self.ctx, text.as_ptr());
            let out = read(self.output, self.ctx);
            let err = read(self.error, self.ctx);
            if rc == 0 {
                Ok(out)
            } else {
                Err(NftError::Command(err.trim().to_string()))
            }
        }
    }
}

impl Drop for Nft {
    fn drop(&mut self) {
        // SAFETY: the context and the library were created in `open` and are used by no one
        // else; the context is freed before the library that holds its code is closed.
        unsafe {
            (self.free)(self.ctx);
            libc::dlclose(self.lib);
        }
    }
}

/// A symbol of `lib` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the function's real signature.
unsafe fn sym<F: Copy>(lib: *mut c_void, name: &CStr) -> Option<F> {
    // SAFETY: dlsym on a live handle with a valid C string.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    // SAFETY: F is a function pointer type (the caller's promise), of the size of a pointer.
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// # Safety
/// `get` must be one of the buffer getters and `ctx` a live context.
unsafe fn read(get: CtxBuffer, ctx: *mut c_void) -> String {
    // SAFETY: the caller's promise; a null buffer reads as empty.
    let p = unsafe { get(ctx) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libnftables returns a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message owned by libc.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}
