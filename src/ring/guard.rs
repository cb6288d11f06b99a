//! The SIGBUS guard of the ring mappings: a ring file cut short under its users (anyone who may
//! write it can `truncate` it) must cost them their leases, never their process.
//!
//! No model: a signal handler that remaps pages, not a protocol between processes; tested by
//! cutting a live ring short under its users (`tests/shared_memory.rs`).
//!
//! Touching a page of a `MAP_SHARED` mapping past the end of its file raises SIGBUS, whose
//! default action kills the host program. So, once the first ring is mapped (never at library
//! load: a program that never opens a store keeps its handlers as they were), a handler is
//! installed for SIGBUS, and every ring mapping is recorded in a fixed registry of atomics. A
//! fault inside a recorded mapping marks it cut, then maps private zero pages over all of it and
//! returns: the faulting access runs again and reads zeros, and the ring's users see the mark
//! (`Ring::intact`) before they act on what they read. Any other SIGBUS goes to the action that
//! was there before (a runtime's handler, Python's faulthandler, or the default, which kills).
//!
//! The handler only loads and stores atomics and makes system calls (mmap, sigaction,
//! sigprocmask, raise): no allocation and no lock, so it is safe whatever thread it interrupts.
//!
//! A handler installed after the first ring was mapped sees every SIGBUS first. Go's runtime
//! installs its own at start, so it comes before (and gets Go's faults, its context intact,
//! `debug.SetPanicOnFault` included); so does Python's faulthandler when enabled at start (`-X
//! faulthandler`, pytest). One enabled later dumps a traceback for a cut ring and raises the
//! signal again, which is then no fault, and the process dies as it did without this guard.

use std::cell::UnsafeCell;
use std::io;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Once;

/// Ring mappings one process can hold at once: one per open store of a multi-process file.
const MAPPINGS: usize = 256;

/// The `start` of an entry nobody uses, and of one being filled in.
const MAPPING_FREE: usize = 0;
const MAPPING_CLAIMED: usize = 1;

struct Entry {
    /// The mapping's address, or `MAPPING_FREE` or `MAPPING_CLAIMED`; written last when an entry is
    /// filled in, so that the handler never sees an address with another mapping's length.
    start: AtomicUsize,
    len: AtomicUsize,
    /// Set by the handler before it replaces the mapping, so that whoever reads the zero pages
    /// finds the mark set.
    cut: AtomicBool,
}

static ENTRIES: [Entry; MAPPINGS] = [const {
    Entry {
        start: AtomicUsize::new(MAPPING_FREE),
        len: AtomicUsize::new(0),
        cut: AtomicBool::new(false),
    }
}; MAPPINGS];

/// The SIGBUS action found when the guard was installed, which the handler passes other
/// faults to. Written once, inside `INSTALL`, before the handler is installed; only read after.
struct Previous(UnsafeCell<MaybeUninit<libc::sigaction>>);

// SAFETY: written once before any reader can run (see `Previous`), then only read.
unsafe impl Sync for Previous {}

static PREVIOUS: Previous = Previous(UnsafeCell::new(MaybeUninit::zeroed()));
static INSTALL: Once = Once::new();
/// The errno of a failed installation, 0 when it succeeded.
static INSTALL_ERROR: AtomicI32 = AtomicI32::new(0);

/// A ring mapping recorded with the guard; [`unregister`] it before unmapping it.
#[derive(Debug)]
pub(crate) struct Guarded(usize);

impl Guarded {
    /// Whether the file was found cut short under the mapping (which now holds zeros).
    pub(crate) fn cut(&self) -> bool {
        ENTRIES
            .get(self.0)
            .is_some_and(|entry| entry.cut.load(Ordering::SeqCst))
    }

    /// The record of a ring that is not a mapping (the models' rings, on the heap): never cut.
    #[cfg(fencelock_loom)]
    pub(crate) fn unmapped() -> Guarded {
        Guarded(usize::MAX)
    }
}

/// Records the mapping of `len` bytes at `start`, installing the handler if this is the first.
pub(crate) fn register(start: *mut u8, len: usize) -> io::Result<Guarded> {
    install()?;
    for (index, entry) in ENTRIES.iter().enumerate() {
        if entry
            .start
            .compare_exchange(
                MAPPING_FREE,
                MAPPING_CLAIMED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            entry.len.store(len, Ordering::Relaxed);
            entry.cut.store(false, Ordering::Relaxed);
            entry.start.store(start as usize, Ordering::Release);
            return Ok(Guarded(index));
        }
    }
    Err(io::Error::other(format!(
        "this process maps {MAPPINGS} rings already"
    )))
}

/// Forgets a mapping, before it is unmapped: a fault at that address afterwards is not a ring's.
pub(crate) fn unregister(guarded: &Guarded) {
    if let Some(entry) = ENTRIES.get(guarded.0) {
        entry.start.store(MAPPING_FREE, Ordering::Release);
    }
}

fn install() -> io::Result<()> {
    INSTALL.call_once(|| {
        // SAFETY: sigaction with valid pointers: first the current action is read into
        // PREVIOUS (nobody reads it yet: the handler is not installed), then the handler is
        // installed. SA_ONSTACK, because Go's runtime requires it of handlers that C code
        // installs in a cgo program (a signal taken on a goroutine's small stack must run on
        // the thread's signal stack); SA_RESTART, so that a system call a sent SIGBUS
        // interrupts is restarted rather than failing with EINTR.
        let failed = unsafe {
            let previous = (*PREVIOUS.0.get()).as_mut_ptr();
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, std::ptr::null(), previous) != 0
                || libc::sigaction(libc::SIGBUS, &raw const action, std::ptr::null_mut()) != 0
        };
        if failed {
            let errno = io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL);
            INSTALL_ERROR.store(errno, Ordering::Relaxed);
        }
    });
    match INSTALL_ERROR.load(Ordering::Relaxed) {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: errno is this thread's; the handler gives back the value it interrupted.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler (a handler that
    // chains to this one without it passes NULL, and gets what the earlier action does).
    if info.is_null() || !unsafe { cut_ring(&*info) } {
        // SAFETY: the arguments this handler was called with.
        unsafe { chain(signal, info, context) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Whether the fault `info` is an access to a recorded ring beyond its file's end; if so, that
/// ring now holds private zero pages and is marked cut.
///
/// # Safety
///
/// Only from the SIGBUS handler: the mapping replaced is one this process recorded.
unsafe fn cut_ring(info: &libc::siginfo_t) -> bool {
    // A SIGBUS sent by a process (si_code <= 0) faulted no access: it is the host's business.
    if info.si_code <= 0 {
        return false;
    }
    // SAFETY: a kernel-generated SIGBUS carries the faulting address.
    let addr = unsafe { info.si_addr() } as usize;
    for entry in &ENTRIES {
        let start = entry.start.load(Ordering::Acquire);
        if start <= MAPPING_CLAIMED {
            continue;
        }
        let len = entry.len.load(Ordering::Relaxed);
        if addr < start || addr - start >= len {
            continue;
        }
        entry.cut.store(true, Ordering::SeqCst);
        // SAFETY: the range is a ring mapping of this process, which nothing else owns; zero
        // pages in its place keep every pointer into it valid (reads see zeros, writes stay
        // private), and the ring's users look at the cut mark before trusting what they read.
        let mapped = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        // Without memory for the zero pages the fault recurs: let it have its default course.
        return mapped != libc::MAP_FAILED;
    }
    false
}

/// Passes a SIGBUS that is no ring's to the action found at installation, as the kernel would
/// have: a handler is called (with its own mask, and reset first if it asked to be); the
/// default kills the process (restored, the fault recurs on return, or a sent signal is raised
/// again); an ignored signal stays ignored unless it is a fault, which the kernel never lets be
/// ignored.
///
/// # Safety
///
/// Only from the SIGBUS handler, with its arguments.
unsafe fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: written before the handler was installed (see `Previous`).
    let previous = unsafe { (*PREVIOUS.0.get()).assume_init_ref() };
    let handler = previous.sa_sigaction;
    // SAFETY: `info` is the kernel's siginfo, when there is one.
    let fault = !info.is_null() && unsafe { (*info).si_code } > 0;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        if handler == libc::SIG_IGN && !fault {
            return;
        }
        // SAFETY: sigaction and raise are async-signal-safe; SIGBUS is blocked while this
        // handler runs, so a raised one is delivered, to the default action, on return.
        unsafe {
            restore_default();
            if !fault {
                libc::raise(signal);
            }
        }
        return;
    }
    // SAFETY: sigprocmask and sigaction are async-signal-safe; the handler is the one the host
    // program installed, called with the arguments its flags ask for.
    unsafe {
        if previous.sa_flags & libc::SA_RESETHAND != 0 {
            restore_default();
        }
        let mut mask = MaybeUninit::<libc::sigset_t>::uninit();
        libc::pthread_sigmask(
            libc::SIG_BLOCK,
            &raw const previous.sa_mask,
            mask.as_mut_ptr(),
        );
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            let call: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(handler);
            call(signal, info, context);
        } else {
            let call: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            call(signal);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, mask.as_ptr(), std::ptr::null_mut());
    }
}

/// Gives SIGBUS its default action (which kills).
///
/// # Safety
///
/// Async-signal-safe; changes the process's SIGBUS action.
unsafe fn restore_default() {
    // SAFETY: an all-zero sigaction is SIG_DFL with no flags and an empty mask.
    unsafe {
        let action: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGBUS, &raw const action, std::ptr::null_mut());
    }
}
