//! The guest's verdict lines: `LAB-CHECK <name> PASS|FAIL|SKIP <why>`, then `LAB-DONE`.

use std::collections::BTreeMap;

use super::kernels::LabKernel;

/// Reads the verdicts; Ok(summary) when every check passed or skipped legitimately.
pub(super) fn parse_serial(
    serial: &str,
    kernel: &LabKernel,
) -> std::result::Result<String, String> {
    let mut results: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut done = false;
    for line in serial.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix("LAB-CHECK ") {
            let mut parts = rest.splitn(3, ' ');
            let name = parts.next().unwrap_or("").to_string();
            let verdict = parts.next().unwrap_or("").to_string();
            let why = parts.next().unwrap_or("").to_string();
            results.insert(name, (verdict, why));
        } else if line.starts_with("LAB-DONE") {
            done = true;
        }
    }
    if !done {
        return Err("no LAB-DONE line: the guest's /init did not finish".into());
    }
    let mut problems = Vec::new();
    for (name, (verdict, why)) in &results {
        if verdict == "FAIL" {
            problems.push(format!("{name} failed: {why}"));
        }
    }
    for name in kernel
        .required
        .iter()
        .flat_map(|list| list.iter())
        .filter(|name| !kernel.excused.contains(name))
    {
        match results.get(*name) {
            Some((verdict, _)) if verdict == "PASS" => {}
            Some((verdict, why)) if verdict != "FAIL" => problems.push(format!(
                "{name} must pass on {} but was {verdict}: {why}",
                kernel.name
            )),
            Some(_) => {}
            None => problems.push(format!("{name} did not run")),
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let line = |verdict: &str| {
        results
            .iter()
            .filter(|(_, (v, _))| v == verdict)
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };
    Ok(format!(
        "passed: {}; skipped: {}",
        line("PASS"),
        match line("SKIP") {
            skipped if skipped.is_empty() => "none".to_string(),
            skipped => skipped,
        }
    ))
}

/// The `LAB-SLAB TYPE CALLER SOURCE NAME` lines of a serial log (`lab-check
/// slab-names`, within its check's output, each line of which the guest's init
/// prefixes with `  | `): (type, caller) -> (source, name).
pub(super) fn slab_names(serial: &str) -> BTreeMap<(String, String), (String, String)> {
    serial
        .lines()
        .filter_map(|line| {
            let (_, rest) = line.trim_end_matches('\r').split_once("LAB-SLAB ")?;
            let mut words = rest.split(' ');
            let (kind, caller, source, name) =
                (words.next()?, words.next()?, words.next()?, words.next()?);
            Some((
                (kind.to_string(), caller.to_string()),
                (source.to_string(), name.to_string()),
            ))
        })
        .collect()
}

/// A boot's slab lock names against those of a `slab_nomerge` boot of the same kernel,
/// by (lock type, caller). Where the reference named a lock from its cache (`slab`:
/// exact, no cache merged), the boot's name must be that name, or, from a merged
/// cache (`slab_merged`, a guess), that name or a set of candidates that holds it;
/// a lock the boot names after its taker (`slab@FUNCTION`) or not at all says nothing
/// wrong. A lock the reference can only place in a generic kmalloc cache
/// (`&kmalloc-64`: objects of many types) does not check a boot's guess of its struct
/// (`slab_kmalloc`, from the functions that take it): not compared. At least one lock of
/// a merged cache must be compared. Ok(summary) or Err(every disagreement).
pub(super) fn compare_slab_names(boot: &str, reference: &str) -> Result<String, String> {
    let (ours, truth) = (slab_names(boot), slab_names(reference));
    let mut problems = Vec::new();
    let (mut compared, mut merged) = (0, 0);
    for (key, (source, name)) in &ours {
        let Some((true_source, true_name)) = truth.get(key) else {
            continue;
        };
        if true_source != "slab"
            || (source == "slab_kmalloc"
                && lockpath_profile::lockclass::is_generic_cache(true_name))
        {
            continue;
        }
        compared += 1;
        let agrees = match source.as_str() {
            "slab_merged" => {
                merged += 1;
                candidates(name).any(|candidate| &candidate == true_name)
            }
            "caller" | "address" => true,
            _ => name == true_name,
        };
        if !agrees {
            problems.push(format!(
                "{} taken in {}: {name} ({source}) where slab_nomerge names it {true_name}",
                key.0, key.1
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    if merged == 0 {
        return Err(format!(
            "no lock of a merged cache to compare ({compared} compared; this boot: {ours:?}; \
             slab_nomerge: {truth:?})"
        ));
    }
    Ok(format!(
        "{compared} slab lock name(s) agree with slab_nomerge's, {merged} of a merged cache"
    ))
}

/// The names a merged-cache name stands for: `&{a->x|b->y}` is either; another is itself.
fn candidates(name: &str) -> impl Iterator<Item = String> + '_ {
    let set = name
        .strip_prefix("&{")
        .and_then(|rest| rest.strip_suffix('}'));
    let (list, prefix): (Vec<&str>, &str) = match set {
        Some(inner) => (inner.split('|').collect(), "&"),
        None => (vec![name], ""),
    };
    list.into_iter()
        .map(move |candidate| format!("{prefix}{candidate}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOMERGE: &str = "\
  | LAB-SLAB spinlock flock_lock_inode slab &file_lock_context->flc_lock\r
  | LAB-SLAB mutex fdget_pos slab &file->f_pos_lock
  | LAB-SLAB mutex pipe_write slab_kmalloc &pipe_inode_info->mutex
LAB-CHECK lock-names-slab PASS 3 lock(s) in slab objects
";

    #[test]
    fn merged_names_that_hold_the_reference_agree() {
        let boot = "\
LAB-SLAB spinlock flock_lock_inode slab_merged &{file_lock_context->flc_lock|x->lock}
LAB-SLAB mutex fdget_pos slab &file->f_pos_lock
LAB-SLAB mutex pipe_write slab_kmalloc &pipe_inode_info->mutex
";
        let summary = compare_slab_names(boot, NOMERGE).expect("agree");
        assert!(summary.starts_with("2 slab lock name(s)"), "{summary}");
        let single = "LAB-SLAB spinlock flock_lock_inode slab_merged &file_lock_context->flc_lock";
        assert!(compare_slab_names(single, NOMERGE).is_ok());
        let by_caller = "LAB-SLAB spinlock flock_lock_inode caller slab@flock_lock_inode\n\
                         LAB-SLAB spinlock flock_lock_inode slab_merged &file_lock_context->flc_lock";
        assert!(compare_slab_names(by_caller, NOMERGE).is_ok());
    }

    #[test]
    fn a_wrong_name_or_nothing_merged_fails() {
        let wrong = "LAB-SLAB spinlock flock_lock_inode slab_merged &ftrace_event_field->lock";
        let why = compare_slab_names(wrong, NOMERGE).expect_err("disagrees");
        assert!(why.contains("flock_lock_inode"), "{why}");
        let wrong_set = "LAB-SLAB spinlock flock_lock_inode slab_merged &{a->b|c->d}";
        assert!(compare_slab_names(wrong_set, NOMERGE).is_err());
        let exact_wrong = "LAB-SLAB mutex fdget_pos slab &filp\n\
                           LAB-SLAB spinlock flock_lock_inode slab_merged &file_lock_context->flc_lock";
        assert!(compare_slab_names(exact_wrong, NOMERGE).is_err());
        // A struct guessed inside a generic kmalloc object is not checked by its cache
        // name, but still counts as nothing compared.
        let nomerge_kmalloc = "LAB-SLAB spinlock barn_replace_full_sheaf slab &kmalloc-64\n";
        let guess = "LAB-SLAB spinlock barn_replace_full_sheaf slab_kmalloc &node_barn->lock";
        let why = compare_slab_names(guess, nomerge_kmalloc).expect_err("nothing compared");
        assert!(why.contains("no lock of a merged cache"), "{why}");
        let unmerged = "LAB-SLAB mutex fdget_pos slab &file->f_pos_lock";
        let why = compare_slab_names(unmerged, NOMERGE).expect_err("nothing merged");
        assert!(why.contains("no lock of a merged cache"), "{why}");
    }
}
