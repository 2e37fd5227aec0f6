//! What a worker holds, by group: the rows claimed (or handed over) and
//! waiting for a slot, served round-robin across groups, and how many rows
//! each group holds in all, for the next claim.
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

/// Rows waiting for a slot, per group, and every row held per group.
#[derive(Debug)]
pub struct Pending<G, T> {
    /// Waiting rows, per group; a group is here only while it has some.
    waiting: HashMap<G, VecDeque<T>>,
    /// Groups with waiting rows, in the order they are served next.
    turn: VecDeque<G>,
    /// Waiting rows in all.
    len: usize,
    /// Rows held per group: waiting, in flight, or waiting for their
    /// settlement. A group is here only while it holds some.
    held: HashMap<G, usize>,
}

impl<G: Copy + Eq + Hash + Debug, T> Default for Pending<G, T> {
    fn default() -> Self {
        Self {
            waiting: HashMap::new(),
            turn: VecDeque::new(),
            len: 0,
            held: HashMap::new(),
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

    /// A row joins the worker: it waits, and its group holds one more.
    pub fn push(&mut self, group: G, row: T) {
        *self.held.entry(group).or_insert(0) += 1;
        let queue = self.waiting.entry(group).or_default();
        if queue.is_empty() {
            self.turn.push_back(group);
        }
        queue.push_back(row);
        self.len += 1;
    }

    /// The next row to start: the oldest of the group whose turn it is.
    /// The row stays held (in flight) until [`Pending::left`].
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

    /// Every waiting row, each group's in order; they stay held until
    /// [`Pending::left`].
    pub fn drain(&mut self) -> Vec<T> {
        self.turn.clear();
        self.len = 0;
        self.waiting.drain().flat_map(|(_, q)| q).collect()
    }

    /// A row of `group` left the worker (settled, given back or dropped).
    pub fn left(&mut self, group: G) {
        let n = self
            .held
            .get_mut(&group)
            .expect("a row leaves only a group that holds it");
        assert!(*n > 0);
        *n -= 1;
        if *n == 0 {
            self.held.remove(&group);
        }
    }

    /// What each group holds now.
    pub fn held(&self) -> Vec<(G, usize)> {
        self.held.iter().map(|(g, n)| (*g, *n)).collect()
    }

    /// Rows held in all, by every group.
    pub fn held_total(&self) -> usize {
        self.held.values().sum()
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
        // Popped rows are still held until they leave.
        assert_eq!(p.held_total(), 6);
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
    }

    #[test]
    fn held_counts_follow_rows_until_they_leave() {
        let mut p = Pending::default();
        p.push('a', 1);
        p.push('a', 2);
        p.push('b', 3);
        let mut held = p.held();
        held.sort();
        assert_eq!(held, [('a', 2), ('b', 1)]);
        let drained = p.drain();
        assert_eq!(drained.len(), 3);
        assert!(p.is_empty());
        p.left('a');
        p.left('b');
        assert_eq!(p.held(), [('a', 1)]);
        p.left('a');
        assert_eq!(p.held_total(), 0);
    }

    #[test]
    #[should_panic(expected = "a row leaves only a group that holds it")]
    fn a_row_cannot_leave_twice() {
        let mut p: Pending<char, i32> = Pending::default();
        p.push('a', 1);
        p.left('a');
        p.left('a');
    }
}
