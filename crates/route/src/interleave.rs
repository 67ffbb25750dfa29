//! Family interleaving (RFC 8305 §4, HEv3 §5.3).

use fastfallback_proto::Family;

/// Interleaves a sorted list by address family.
///
/// > After sorting, interleave the families: the first endpoint's family is followed by the
/// > first endpoint of the other family (HEv3 §5.3, RFC 8305 §4).
///
/// `lead` is the family that goes first (if it has any entries). The first
/// `preferred_family_count` entries come from it; after that the families alternate one by one
/// (reference profile P3), and when one runs out the rest of the other follows. Order within a
/// family is kept. The output is always a permutation of the input.
///
/// ```
/// use fastfallback_route::{interleave, Family};
/// // 4 v6 + 2 v4 with PAFC = 2: v6a, v6b, v4a, v6c, v4b, v6d (profile P3).
/// let items = vec![("v6a", Family::V6), ("v6b", Family::V6), ("v6c", Family::V6),
///                  ("v6d", Family::V6), ("v4a", Family::V4), ("v4b", Family::V4)];
/// let out: Vec<_> = interleave(items, |i| i.1, Family::V6, 2).into_iter().map(|i| i.0).collect();
/// assert_eq!(out, ["v6a", "v6b", "v4a", "v6c", "v4b", "v6d"]);
/// ```
pub fn interleave<T>(
    items: Vec<T>,
    family_of: impl Fn(&T) -> Family,
    lead: Family,
    preferred_family_count: usize,
) -> Vec<T> {
    let n = items.len();
    let (mut first, mut second) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for item in items {
        if family_of(&item) == lead {
            first.push(item);
        } else {
            second.push(item);
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut first = first.into_iter();
    let mut second = second.into_iter();
    out.extend(first.by_ref().take(preferred_family_count.max(1)));
    loop {
        match (second.next(), first.next()) {
            (None, None) => break,
            (a, b) => out.extend(a.into_iter().chain(b)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fam(s: &&str) -> Family {
        if s.starts_with("v6") {
            Family::V6
        } else {
            Family::V4
        }
    }

    fn run(items: &[&'static str], lead: Family, pafc: usize) -> Vec<&'static str> {
        interleave(items.to_vec(), fam, lead, pafc)
    }

    #[test]
    fn three_and_three_alternate_starting_with_v6() {
        let out = run(&["v6a", "v6b", "v6c", "v4a", "v4b", "v4c"], Family::V6, 1);
        assert_eq!(out, ["v6a", "v4a", "v6b", "v4b", "v6c", "v4c"]);
    }

    #[test]
    fn pafc_two_lets_two_preferred_go_first() {
        let out = run(&["v6a", "v6b", "v6c", "v4a", "v4b", "v4c"], Family::V6, 2);
        assert_eq!(out, ["v6a", "v6b", "v4a", "v6c", "v4b", "v4c"]);
    }

    #[test]
    fn unbalanced_families_append_the_rest() {
        let out = run(&["v6a", "v6b", "v6c", "v6d", "v4a"], Family::V6, 1);
        assert_eq!(out, ["v6a", "v4a", "v6b", "v6c", "v6d"]);
    }

    #[test]
    fn okhttp_prioritise_ipv6_example() {
        // InetAddressOrderTest IO-1: v4 (.6, .1, .4) and v6 (::ac, ::fc).
        let out = run(&["v4.6", "v4.1", "v4.4", "v6ac", "v6fc"], Family::V6, 1);
        assert_eq!(out, ["v6ac", "v4.6", "v6fc", "v4.1", "v4.4"]);
    }

    #[test]
    fn single_family_lists_are_unchanged() {
        assert_eq!(run(&["v6a", "v6b"], Family::V6, 1), ["v6a", "v6b"]);
        assert_eq!(run(&["v4a", "v4b"], Family::V6, 1), ["v4a", "v4b"]);
        assert_eq!(run(&["v4a"], Family::V6, 1), ["v4a"]);
        assert!(run(&[], Family::V6, 1).is_empty());
    }

    #[test]
    fn v4_lead_puts_ipv4_first() {
        assert_eq!(
            run(&["v6a", "v4a", "v6b"], Family::V4, 1),
            ["v4a", "v6a", "v6b"]
        );
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn interleaving_is_a_permutation_that_keeps_order_within_a_family(
            fams in prop::collection::vec(any::<bool>(), 0..64),
            lead_v6 in any::<bool>(),
            pafc in 1usize..4,
        ) {
            let items: Vec<(usize, Family)> = fams
                .iter()
                .enumerate()
                .map(|(i, v6)| (i, if *v6 { Family::V6 } else { Family::V4 }))
                .collect();
            let lead = if lead_v6 { Family::V6 } else { Family::V4 };
            let out = interleave(items.clone(), |i| i.1, lead, pafc);
            let mut sorted = out.clone();
            sorted.sort();
            prop_assert_eq!(sorted, items);
            for f in Family::ALL {
                let idx: Vec<usize> = out.iter().filter(|i| i.1 == f).map(|i| i.0).collect();
                prop_assert!(idx.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}
