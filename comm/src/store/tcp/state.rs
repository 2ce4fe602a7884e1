//! The server's data: keys, queues, and the clients waiting for keys; and
//! what each request does to them (the semantics of torch's libuv server).

use std::collections::{HashMap, VecDeque};

use super::super::kv::{self, AddError};
use super::request::Request;
use super::wire::{Message, NOT_READY, READY, STOP_WAITING, WAIT_CANCELED};

/// A connection's number, unique among the connected clients.
pub(super) type ClientId = usize;

/// Bytes to send, each to a client, in the order the store decided them.
pub(super) type Replies = Vec<(ClientId, Vec<u8>)>;

/// The server's data, owned by its event loop. Every request's reply and the
/// wake-ups it causes are listed in order, so they reach each client in the
/// order of the requests.
#[derive(Debug, Default)]
pub(super) struct State {
    map: HashMap<Vec<u8>, Vec<u8>>,
    queues: HashMap<Vec<u8>, VecDeque<Vec<u8>>>,
    /// Key -> the clients waiting for it (once per time they named it).
    waiting: HashMap<Vec<u8>, Vec<ClientId>>,
    /// Client -> its pending `WAIT` (or `BARRIER`).
    waiters: HashMap<ClientId, Waiter>,
}

#[derive(Debug)]
struct Waiter {
    /// Keys still missing, counting repeats.
    remaining: usize,
    /// The keys the client is listed under in `waiting`.
    keys: Vec<Vec<u8>>,
}

impl State {
    /// Runs `request` of client `id`, listing any reply and wake-up in
    /// `out`. An error (a request torch's server would fail on) means the
    /// connection is to be closed.
    pub(super) fn apply(
        &mut self,
        id: ClientId,
        request: Request,
        out: &mut Replies,
    ) -> Result<(), String> {
        let reply = |out: &mut Replies, m: Message| out.push((id, m.into_bytes()));
        match request {
            Request::Validate(_) => return Err("VALIDATE after the first message".into()),
            Request::Ping(nonce) => reply(out, Message::reply().u32(nonce)),
            Request::Set(key, value) => self.set(key, value, out),
            Request::CompareSet {
                key,
                expected,
                desired,
            } => {
                let current = self.map.get(&key).map(Vec::as_slice);
                let (store, answer) = kv::compare_set(current, &expected, &desired);
                reply(out, Message::reply().bytes(answer));
                if store {
                    self.set(key, desired, out);
                }
            }
            Request::Get(key) => {
                // Never waits: the client sent WAIT first. Missing: empty.
                let value = self.map.get(&key).map_or(&[][..], Vec::as_slice);
                reply(out, Message::reply().bytes(value));
            }
            Request::Add(key, delta) => {
                let n = self.add(&key, delta, out)?;
                reply(out, Message::reply().i64(n));
            }
            Request::Check(keys) => {
                let ready = keys.iter().all(|k| self.present(k));
                reply(
                    out,
                    Message::reply().u8(if ready { READY } else { NOT_READY }),
                );
            }
            Request::Wait(keys) => self.wait(id, keys, out),
            Request::NumKeys => reply(out, Message::reply().i64(self.map.len() as i64)),
            Request::Delete(key) => {
                let existed = self.map.remove(&key).is_some();
                reply(out, Message::reply().i64(i64::from(existed)));
            }
            Request::Append(key, value) => {
                let mut new = self.map.remove(&key).unwrap_or_default();
                new.extend_from_slice(&value);
                self.set(key, new, out);
            }
            Request::MultiGet(keys) => {
                let mut m = Message::reply();
                for key in &keys {
                    m = m.bytes(self.map.get(key).map_or(&[][..], Vec::as_slice));
                }
                reply(out, m);
            }
            Request::MultiSet(pairs) => {
                for (key, value) in pairs {
                    self.set(key, value, out);
                }
            }
            Request::CancelWait => {
                self.forget(id);
                reply(out, Message::reply().u8(WAIT_CANCELED));
            }
            Request::QueuePush(key, value) => {
                self.queues.entry(key.clone()).or_default().push_back(value);
                self.wake_one(&key, out);
            }
            Request::QueuePop(key) => {
                let queue = self.queues.entry(key).or_default();
                let mut m = Message::reply().i64(queue.len() as i64);
                if let Some(value) = queue.pop_front() {
                    m = m.bytes(&value);
                }
                reply(out, m);
            }
            Request::QueueLen(key) => {
                let len = self.queues.get(&key).map_or(0, VecDeque::len);
                reply(out, Message::reply().i64(len as i64));
            }
            Request::ListKeys => {
                let mut m = Message::reply().i64(self.map.len() as i64);
                for key in self.map.keys() {
                    m = m.bytes(key);
                }
                reply(out, m);
            }
            Request::Barrier(key, world_size) => {
                // Counts the arrival without waking those already waiting.
                let count = self.counter(&key, 1)?;
                self.map.insert(key.clone(), kv::counter_bytes(count));
                self.forget(id);
                if count >= world_size {
                    self.wake(&key, out);
                    reply(out, Message::reply().u8(STOP_WAITING));
                } else {
                    self.enlist(id, vec![key]);
                }
            }
        }
        Ok(())
    }

    /// Drops client `id`'s pending wait, if any (it cancelled or left).
    pub(super) fn forget(&mut self, id: ClientId) {
        let Some(waiter) = self.waiters.remove(&id) else {
            return;
        };
        for key in waiter.keys {
            if let Some(list) = self.waiting.get_mut(&key) {
                list.retain(|c| *c != id);
                if list.is_empty() {
                    self.waiting.remove(&key);
                }
            }
        }
    }

    /// Whether `key` counts as set for `CHECK` and `WAIT`: a value, or a
    /// non-empty queue.
    fn present(&self, key: &[u8]) -> bool {
        self.map.contains_key(key) || self.queues.get(key).is_some_and(|q| !q.is_empty())
    }

    fn set(&mut self, key: Vec<u8>, value: Vec<u8>, out: &mut Replies) {
        self.map.insert(key.clone(), value);
        self.wake(&key, out);
    }

    fn add(&mut self, key: &[u8], delta: i64, out: &mut Replies) -> Result<i64, String> {
        let n = self.counter(key, delta)?;
        self.set(key.to_vec(), kv::counter_bytes(n), out);
        Ok(n)
    }

    /// The counter at `key` plus `delta`.
    fn counter(&self, key: &[u8], delta: i64) -> Result<i64, String> {
        kv::add(self.map.get(key).map(Vec::as_slice), delta).map_err(|e| {
            let key = String::from_utf8_lossy(key);
            match e {
                AddError::NotAnInteger => {
                    format!("ADD on key {key:?}, whose value is not an integer")
                }
                AddError::Overflow(old) => {
                    format!("ADD of {delta} to {old} at key {key:?} overflows")
                }
            }
        })
    }

    fn wait(&mut self, id: ClientId, keys: Vec<Vec<u8>>, out: &mut Replies) {
        self.forget(id);
        let missing: Vec<Vec<u8>> = keys.into_iter().filter(|k| !self.present(k)).collect();
        if missing.is_empty() {
            out.push((id, vec![STOP_WAITING]));
        } else {
            self.enlist(id, missing);
        }
    }

    /// Lists client `id` as waiting for every one of `keys`.
    fn enlist(&mut self, id: ClientId, keys: Vec<Vec<u8>>) {
        for key in &keys {
            self.waiting.entry(key.clone()).or_default().push(id);
        }
        let waiter = Waiter {
            remaining: keys.len(),
            keys,
        };
        self.waiters.insert(id, waiter);
    }

    /// `key` was set: counts it off for every client waiting for it, and
    /// sends `STOP_WAITING` to those that have all their keys now.
    fn wake(&mut self, key: &[u8], out: &mut Replies) {
        for id in self.waiting.remove(key).unwrap_or_default() {
            self.count_off(id, out);
        }
    }

    /// An item was queued at `key`: counts it off for the first client
    /// waiting for it.
    fn wake_one(&mut self, key: &[u8], out: &mut Replies) {
        let Some(list) = self.waiting.get_mut(key) else {
            return;
        };
        let id = list.remove(0);
        if list.is_empty() {
            self.waiting.remove(key);
        }
        self.count_off(id, out);
    }

    fn count_off(&mut self, id: ClientId, out: &mut Replies) {
        let Some(waiter) = self.waiters.get_mut(&id) else {
            return;
        };
        waiter.remaining = waiter.remaining.saturating_sub(1);
        if waiter.remaining == 0 {
            self.waiters.remove(&id);
            out.push((id, vec![STOP_WAITING]));
        }
    }
}
