//! The one way payrail and its load generator take a `Mutex`.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, recovering it if a panicking thread poisoned it. Only for
/// locks whose every critical section is a single operation on the value
/// (a map lookup or insert, a counter bump): a panic cannot leave such a
/// value half-updated, so a poisoned lock still guards a sound value, and
/// one panicked request must not take every later one down with it.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_yields_its_value() {
        let m = std::sync::Arc::new(Mutex::new(7));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m), 7);
    }
}
