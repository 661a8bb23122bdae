// Package lifecycle is the reconcile discipline every metalhub reconciler follows:
//
//   - Lifecycle state is bookkeeping: one annotation, written with an optimistic lock and read
//     only from there (Store). status only mirrors it.
//   - One write, then return: a Pass lets a handler write its object once; the write's own watch
//     event starts the next pass on a fresh object (Pass, Result).
//   - A pass that still sees the resourceVersion its last write replaced requeues instead of
//     acting on a stale cache (Guard).
//   - Events that matter get through, status churn does not (Predicate), plus a periodic resync.
//   - Report fields change only when what they report changes (SetCondition, Report).
package lifecycle
