//! The ranks of this process: every communicator rank that joined from
//! this process registers its vendor's memory registry here, so a peer
//! rank of the same process can read its buffers directly, under that
//! registry's read lock (a buffer cannot be freed meanwhile) and checked
//! against it.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::memory::Memory;

/// Registries by segment name and rank.
type Table = HashMap<(String, usize), Weak<Memory>>;

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// Registers rank `rank` of the communicator of segment `name`.
pub(crate) fn register(name: &str, rank: usize, memory: &Arc<Memory>) {
    TABLE
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert((name.to_owned(), rank), Arc::downgrade(memory));
}

/// Removes what [`register`] added.
pub(crate) fn unregister(name: &str, rank: usize) {
    if let Some(table) = TABLE.lock().as_mut() {
        table.remove(&(name.to_owned(), rank));
    }
}

/// The registry of rank `rank` of `name`, if that rank joined from this
/// process and its vendor's memory still exists.
pub(crate) fn memory(name: &str, rank: usize) -> Option<Arc<Memory>> {
    TABLE
        .lock()
        .as_ref()?
        .get(&(name.to_owned(), rank))?
        .upgrade()
}
