//! Unit tests of the batching's pure parts.

use super::*;

/// Three items or 10 bytes a call.
struct Small;

impl Batch for Small {
    type Item = usize;
    type Out = ();
    const MAX_ITEMS: usize = 3;
    const MAX_BYTES: usize = 10;
    fn bytes(item: &usize) -> usize {
        *item
    }
}

#[test]
fn chunks_keep_order_and_both_limits_and_take_an_oversized_item_alone() {
    let cut = |items: &[usize]| chunks::<Small, _>(items.to_vec(), Small::bytes);
    assert!(cut(&[]).is_empty());
    assert_eq!(cut(&[1, 1, 1, 1]), vec![vec![1, 1, 1], vec![1]]);
    assert_eq!(cut(&[4, 6, 1]), vec![vec![4, 6], vec![1]]);
    assert_eq!(cut(&[2, 30, 2]), vec![vec![2], vec![30], vec![2]]);
}
