//! Splits a whole token count over chunks so the parts add up to it exactly:
//! the largest-remainder (Hamilton) method. Used for the per-chunk estimate
//! from text length (`accounting`).

/// `total` split into one part per weight, in proportion to the weights, the
/// parts adding up to `total` exactly.
///
/// Each part gets the floor of its quota, and the units left over (fewer
/// than the number of parts) go one each to the largest remainders, the
/// earlier part first on a tie. All-zero weights count as equal. No weights,
/// no parts (the caller decides where `total` goes then).
///
/// With `at_least_one` and `total >= weights.len()`, a part left at zero then
/// takes one unit from the largest part (the earliest of equals): a streamed
/// chunk carried at least one token, however short its text.
pub fn apportion(total: u64, weights: &[u64], at_least_one: bool) -> Vec<u64> {
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let weight_sum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let weight = |w: u64| if weight_sum == 0 { 1 } else { u128::from(w) };
    let divisor = if weight_sum == 0 {
        n as u128
    } else {
        weight_sum
    };
    let mut parts = Vec::with_capacity(n);
    let mut remainders = Vec::with_capacity(n);
    let mut given = 0u64;
    for (i, &w) in weights.iter().enumerate() {
        let quota = u128::from(total) * weight(w);
        // quota / divisor <= total, so it fits.
        let floor = (quota / divisor) as u64;
        parts.push(floor);
        remainders.push((quota % divisor, i));
        given += floor;
    }
    let left = (total - given) as usize;
    if left > 0 {
        // Largest remainder first, earlier part first on a tie.
        let order = |a: &(u128, usize), b: &(u128, usize)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        remainders.select_nth_unstable_by(left - 1, order);
        for &(_, i) in &remainders[..left] {
            parts[i] += 1;
        }
    }
    if at_least_one && total >= n as u64 {
        give_every_part_one(&mut parts);
    }
    parts
}

/// Moves a unit from the largest part to each part at zero. With a sum of
/// at least the number of parts, a zero means some part holds two or more.
fn give_every_part_one(parts: &mut [u64]) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    if !parts.contains(&0) {
        return;
    }
    let mut largest: BinaryHeap<(u64, Reverse<usize>)> = parts
        .iter()
        .enumerate()
        .map(|(i, &p)| (p, Reverse(i)))
        .collect();
    for i in 0..parts.len() {
        if parts[i] != 0 {
            continue;
        }
        let Some((p, Reverse(j))) = largest.pop() else {
            break;
        };
        parts[j] = p - 1;
        parts[i] = 1;
        largest.push((p - 1, Reverse(j)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn proportional_parts_with_the_remainders_to_the_largest() {
        // 10 over 1:1:1 -> 3.33 each: the first takes the unit left over.
        assert_eq!(apportion(10, &[1, 1, 1], false), vec![4, 3, 3]);
        // 7 over 5:3:2 -> 3.5, 2.1, 1.4: floors 3, 2, 1, the unit to 0.5.
        assert_eq!(apportion(7, &[5, 3, 2], false), vec![4, 2, 1]);
        assert_eq!(apportion(0, &[5, 3], false), vec![0, 0]);
        assert_eq!(apportion(5, &[0, 0], false), vec![3, 2]);
        assert!(apportion(5, &[], true).is_empty());
    }

    #[test]
    fn at_least_one_takes_from_the_largest_part() {
        // 64 tokens over 16 chunks of 4 words of the same length: 4 each.
        assert_eq!(apportion(64, &[20; 16], true), vec![4; 16]);
        // Words of one length: chunks of 1, 3 and 5 words get 1, 3 and 5.
        assert_eq!(apportion(9, &[6, 18, 30], true), vec![1, 3, 5]);
        // One long chunk among short ones still leaves each short one a token.
        assert_eq!(apportion(6, &[1, 1, 100], true), vec![1, 1, 4]);
        // Fewer tokens than chunks: no floor of one, plain proportions.
        assert_eq!(apportion(2, &[1, 1, 1], true), vec![1, 1, 0]);
    }

    proptest! {
        #[test]
        fn parts_add_up_and_stay_within_one_of_their_quota(
            total in 0u64..5_000,
            weights in prop::collection::vec(0u64..300, 1..64),
            at_least_one in any::<bool>(),
        ) {
            let parts = apportion(total, &weights, at_least_one);
            prop_assert_eq!(parts.len(), weights.len());
            prop_assert_eq!(parts.iter().sum::<u64>(), total);
            let n = weights.len() as u64;
            if at_least_one && total >= n {
                prop_assert!(parts.iter().all(|&p| p >= 1));
                // The floor moves units only to parts that had none.
                let plain = apportion(total, &weights, false);
                for (&p, &q) in parts.iter().zip(&plain) {
                    prop_assert!(p <= q.max(1));
                }
                return Ok(());
            }
            let sum: u64 = weights.iter().sum();
            for (&p, &w) in parts.iter().zip(&weights) {
                let quota = if sum == 0 {
                    total as f64 / n as f64
                } else {
                    total as f64 * w as f64 / sum as f64
                };
                prop_assert!((p as f64 - quota).abs() < 1.0 + 1e-9);
            }
        }
    }
}
