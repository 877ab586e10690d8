//! Splits a whole token count over chunks so the parts add up to it exactly:
//! the largest-remainder (Hamilton) method. Used for the per-chunk estimate
//! from text length (`accounting`) and, through the binding, to reconcile a
//! tokenizer's per-chunk counts with the server's count
//! (`specreplay.chunk_tokenizer`).

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, ListBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, Int8Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::ArrowError;

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

/// The per-chunk counts of one request: `output` split over the chunks by
/// `weights` (at least one each), each side over its own chunks when the
/// server gave the reasoning count `reasoning` (`is_reasoning` says which
/// side a chunk is on), over all of them otherwise. Returns the parts and the
/// reasoning chunks' sum. A side with a count but no chunk keeps its count
/// out of the parts (hidden reasoning): no chunk carried it.
pub fn split_by_side(
    weights: &[u64],
    is_reasoning: &[bool],
    output: u64,
    reasoning: Option<u64>,
) -> (Vec<u64>, u64) {
    let mut parts = vec![0; weights.len()];
    let sides: &[(Option<bool>, u64)] = match reasoning {
        Some(r) => &[(Some(true), r), (Some(false), output.saturating_sub(r))],
        None => &[(None, output)],
    };
    for &(side, total) in sides {
        let on_side = |i: &usize| side.is_none_or(|r| is_reasoning[*i] == r);
        let index: Vec<usize> = (0..weights.len()).filter(on_side).collect();
        let side_weights: Vec<u64> = index.iter().map(|&i| weights[i]).collect();
        for (i, part) in index.into_iter().zip(apportion(total, &side_weights, true)) {
            parts[i] = part;
        }
    }
    let reasoning_sum = parts
        .iter()
        .zip(is_reasoning)
        .filter(|(_, &r)| r)
        .map(|(p, _)| p)
        .sum();
    (parts, reasoning_sum)
}

/// `split_by_side` over columns, one row per request: `weights`
/// (list<int64>: a tokenizer's count per chunk), `chunk_channel` (list<int8>,
/// 0 = reasoning), `output_tokens` (int64, the server's count) and
/// `reasoning_tokens` (int64: the server's split, null when it gave none).
/// Returns `chunk_tokens` (list<int32>) and `reasoning_tokens` (int64: the
/// server's where given, else the reasoning chunks' sum). A row with a null
/// count comes back with null lists.
pub fn reconcile_batch(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| ArrowError::SchemaError(format!("no column {name:?}")))
    };
    let list = |name: &str| {
        column(name)?
            .as_list_opt::<i32>()
            .ok_or_else(|| ArrowError::SchemaError(format!("{name}: not a list")))
    };
    let (weights, channels) = (list("weights")?, list("chunk_channel")?);
    let output = column("output_tokens")?.as_primitive_opt::<Int64Type>();
    let reasoning = column("reasoning_tokens")?.as_primitive_opt::<Int64Type>();
    let (Some(output), Some(reasoning)) = (output, reasoning) else {
        return Err(ArrowError::SchemaError(
            "output_tokens and reasoning_tokens must be int64".into(),
        ));
    };
    let mut tokens = ListBuilder::new(Int32Builder::new());
    let mut reasoning_out = Int64Builder::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        if weights.is_null(row) || channels.is_null(row) || output.is_null(row) {
            tokens.append_null();
            reasoning_out.append_option(reasoning.is_valid(row).then(|| reasoning.value(row)));
            continue;
        }
        let w = weights.value(row);
        let w = w
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| ArrowError::SchemaError("weights: not a list of int64".into()))?;
        let c = channels.value(row);
        let c = c
            .as_primitive_opt::<Int8Type>()
            .ok_or_else(|| ArrowError::SchemaError("chunk_channel: not a list of int8".into()))?;
        if w.len() != c.len() {
            return Err(ArrowError::InvalidArgumentError(format!(
                "row {row}: {} weights for {} chunks",
                w.len(),
                c.len()
            )));
        }
        let w: Vec<u64> = w.values().iter().map(|&x| x.max(0) as u64).collect();
        let is_reasoning: Vec<bool> = c.values().iter().map(|&x| x == 0).collect();
        let given = reasoning
            .is_valid(row)
            .then(|| reasoning.value(row).max(0) as u64);
        let (parts, sum) = split_by_side(&w, &is_reasoning, output.value(row).max(0) as u64, given);
        for part in parts {
            tokens
                .values()
                .append_value(i32::try_from(part).unwrap_or(i32::MAX));
        }
        tokens.append(true);
        reasoning_out.append_value(given.unwrap_or(sum) as i64);
    }
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("chunk_tokens", Arc::new(tokens.finish())),
        ("reasoning_tokens", Arc::new(reasoning_out.finish())),
    ];
    RecordBatch::try_from_iter_with_nullable(
        columns.into_iter().map(|(name, array)| (name, array, true)),
    )
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

    #[test]
    fn each_side_over_its_own_chunks_when_the_split_is_known() {
        let reasoning = [true, true, false];
        // 6 reasoning over 4:2 characters, 3 on the answer chunk.
        assert_eq!(
            split_by_side(&[4, 2, 2], &reasoning, 9, Some(6)),
            (vec![4, 2, 3], 6)
        );
        // Without the split, 9 over 4:2:2 for all: 4.5, 2.25, 2.25.
        assert_eq!(
            split_by_side(&[4, 2, 2], &reasoning, 9, None),
            (vec![5, 2, 2], 7)
        );
        // Hidden reasoning: 5 counted, none streamed, kept out of the parts.
        assert_eq!(
            split_by_side(&[3, 3], &[false, false], 9, Some(5)),
            (vec![2, 2], 0)
        );
    }

    #[test]
    fn reconcile_batch_splits_each_row() {
        use arrow_array::builder::Int8Builder;
        use arrow_array::Int64Array;
        let mut weights = ListBuilder::new(Int64Builder::new());
        let mut channels = ListBuilder::new(Int8Builder::new());
        for (w, c) in [
            (vec![2i64, 2, 1], vec![0i8, 0, 1]),
            (vec![1, 1], vec![1, 1]),
        ] {
            weights.values().append_slice(&w);
            weights.append(true);
            channels.values().append_slice(&c);
            channels.append(true);
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("weights", Arc::new(weights.finish())),
            ("chunk_channel", Arc::new(channels.finish())),
            ("output_tokens", Arc::new(Int64Array::from(vec![6, 3]))),
            (
                "reasoning_tokens",
                Arc::new(Int64Array::from(vec![None, Some(0)])),
            ),
        ];
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let out = reconcile_batch(&batch).unwrap();
        let tokens = out.column(0).as_list::<i32>();
        let row = |i: usize| {
            tokens
                .value(i)
                .as_primitive::<arrow_array::types::Int32Type>()
                .values()
                .to_vec()
        };
        // The tokenizer counted 5, the server 6: the unit goes to the first chunk.
        assert_eq!(row(0), vec![3, 2, 1]);
        assert_eq!(row(1), vec![2, 1]);
        let reasoning = out.column(1).as_primitive::<Int64Type>();
        assert_eq!((reasoning.value(0), reasoning.value(1)), (5, 0));
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
