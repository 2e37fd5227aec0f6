//! What a worker holds, by group: the rows waiting for a slot, served
//! round-robin across groups ([`Pending`]), and how many rows each group
//! brought in by claims holds, for the next claim ([`GroupCounts`]).
//!
//! Why round-robin: a worker's pending rows arrive in bursts per group (one
//! client's flushes hand over hundreds of rows at once). Served first come,
//! first served, one client's burst against a slow provider would hold every
//! slot for as long as the burst lasts, and another client's single row
//! would wait behind all of it. Taken in turn per group, that row starts at
//! the next free slot.

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;

/// Rows waiting for a slot, per group, served round-robin.
#[derive(Debug)]
pub struct Pending<G, T> {
    /// Waiting rows, per group; a group is here only while it has some.
    waiting: HashMap<G, VecDeque<T>>,
    /// Groups with waiting rows, in the order they are served next.
    turn: VecDeque<G>,
    /// Waiting rows in all.
    len: usize,
}

impl<G: Copy + Eq + Hash + Debug, T> Default for Pending<G, T> {
    fn default() -> Self {
        Self {
            waiting: HashMap::new(),
            turn: VecDeque::new(),
            len: 0,
        }
    }
}

impl<G: Copy + Eq + Hash + Debug, T> Pending<G, T> {
    /// Rows waiting for a slot.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no row waits for a slot.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A row waits for a slot.
    pub fn push(&mut self, group: G, row: T) {
        let queue = self.waiting.entry(group).or_default();
        if queue.is_empty() {
            self.turn.push_back(group);
        }
        queue.push_back(row);
        self.len += 1;
    }

    /// The next row to start: the oldest of the group whose turn it is.
    pub fn pop(&mut self) -> Option<T> {
        let group = self.turn.pop_front()?;
        let queue = self
            .waiting
            .get_mut(&group)
            .expect("a group takes turns only while it has waiting rows");
        let row = queue.pop_front().expect("a waiting group has a row");
        if queue.is_empty() {
            self.waiting.remove(&group);
        } else {
            self.turn.push_back(group);
        }
        self.len -= 1;
        Some(row)
    }

    /// Every waiting row, each group's in order.
    pub fn drain(&mut self) -> Vec<T> {
        self.turn.clear();
        self.len = 0;
        self.waiting.drain().flat_map(|(_, q)| q).collect()
    }
}

/// Rows per group, counted while they are held; a group is kept only while
/// it counts some.
#[derive(Debug)]
pub struct GroupCounts<G>(HashMap<G, usize>);

impl<G> Default for GroupCounts<G> {
    fn default() -> Self {
        Self(HashMap::new())
    }
}

impl<G: Copy + Eq + Hash + Debug> GroupCounts<G> {
    /// One more row of `group`.
    pub fn add(&mut self, group: G) {
        *self.0.entry(group).or_insert(0) += 1;
    }

    /// One row of `group` fewer.
    pub fn remove(&mut self, group: G) {
        let n = self
            .0
            .get_mut(&group)
            .expect("a row leaves only a group that counts it");
        assert!(*n > 0);
        *n -= 1;
        if *n == 0 {
            self.0.remove(&group);
        }
    }

    /// Every group counting rows, with how many.
    pub fn all(&self) -> Vec<(G, usize)> {
        self.0.iter().map(|(g, n)| (*g, *n)).collect()
    }

    /// Rows counted over every group.
    pub fn total(&self) -> usize {
        self.0.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_take_turns_and_each_keeps_its_order() {
        let mut p = Pending::default();
        for i in 0..4 {
            p.push('a', i);
        }
        p.push('b', 10);
        p.push('b', 11);
        assert_eq!(p.len(), 6);
        let order: Vec<i32> = std::iter::from_fn(|| p.pop()).collect();
        assert_eq!(order, [0, 10, 1, 11, 2, 3]);
        assert!(p.is_empty());
    }

    #[test]
    fn a_group_arriving_late_is_served_at_the_next_turn() {
        let mut p = Pending::default();
        for i in 0..100 {
            p.push('a', i);
        }
        assert_eq!(p.pop(), Some(0));
        p.push('b', 1000);
        assert_eq!(p.pop(), Some(1), "a's turn had come already");
        assert_eq!(p.pop(), Some(1000), "b waits for one row of a, not 98");
        let rest = p.drain();
        assert_eq!(rest.len(), 98);
        assert!(p.is_empty() && p.pop().is_none());
    }

    #[test]
    fn counts_follow_rows_until_they_leave() {
        let mut c = GroupCounts::default();
        c.add('a');
        c.add('a');
        c.add('b');
        let mut all = c.all();
        all.sort();
        assert_eq!(all, [('a', 2), ('b', 1)]);
        c.remove('a');
        c.remove('b');
        assert_eq!(c.all(), [('a', 1)]);
        assert_eq!(c.total(), 1);
    }

    #[test]
    #[should_panic(expected = "a row leaves only a group that counts it")]
    fn a_row_cannot_leave_twice() {
        let mut c = GroupCounts::default();
        c.add('a');
        c.remove('a');
        c.remove('a');
    }
}
