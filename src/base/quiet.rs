//! Catching the storage engine's panics without printing them.
//!
//! redb panics on some forms of file damage. The engine catches those panics and returns
//! [`crate::Error::Corrupt`] or [`crate::Error::Storage`], so the panic message printed by the
//! standard hook would only be noise on the host's stderr (a C, Python or Go program's too). A
//! hook installed once, in front of whatever hook the program had, stays silent for panics
//! raised inside [`catch`] on the thread that called it and hands every other panic to the
//! program's hook unchanged. A panic that cannot unwind (one raised by a destructor while an
//! earlier panic unwinds) aborts the process whatever `catch` does: it is printed too, so that
//! the abort is explained.

use std::any::Any;
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// How many [`catch`] calls this thread is inside.
    static CATCHING: Cell<u32> = const { Cell::new(0) };
    /// Whether a panic inside [`catch`] is unwinding on this thread.
    static UNWINDING: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

/// Runs `f`; a panic inside it becomes `Err` with the panic's message, and prints nothing.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    HOOK.call_once(|| {
        let earlier = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            // A second panic while the first unwinds cannot be caught: it aborts.
            if CATCHING.with(Cell::get) == 0 || UNWINDING.with(|unwinding| unwinding.replace(true))
            {
                earlier(info);
            }
        }));
    });
    CATCHING.with(|depth| depth.set(depth.get() + 1));
    let outcome = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|depth| depth.set(depth.get() - 1));
    UNWINDING.with(|unwinding| unwinding.set(false));
    outcome.map_err(|payload| message(payload.as_ref()))
}

/// The message of a panic payload.
fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_panic_gives_its_message_and_the_next_call_works() {
        assert_eq!(
            catch(|| panic!("page {} is damaged", 7)),
            Err::<(), _>("page 7 is damaged".into())
        );
        assert_eq!(catch(|| 5), Ok(5));
        // Nested catches keep the hook quiet until the outermost ends.
        assert_eq!(
            catch(|| catch(|| panic!("inner")).unwrap_err()),
            Ok("inner".into())
        );
    }
}
