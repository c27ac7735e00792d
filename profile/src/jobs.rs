//! Jobs: what a batch system, container runtime or service manager runs, read from a
//! process's cgroup v2 path (`Process::cgroup`). Built in, tried in this order:
//!
//! - Slurm: a `job_N` component (`/system.slice/slurmstepd.scope/job_4711/step_0/...`)
//!   is `job 4711`;
//! - Kubernetes: a `...-pod<UID>.slice` component is `pod <UID>`;
//! - containers: `docker-<ID>.scope`, `libpod-<ID>.scope`, `cri-containerd-<ID>.scope`,
//!   `crio-<ID>.scope` or a bare 64-digit id are `container <first 12 digits>`;
//! - systemd: the deepest `<NAME>.service` component is `service <NAME>`.
//!
//! Patterns of the user's own (`--job-pattern REGEX`) come before them: the first that
//! matches names the job by its first capture group, or by its whole match without one.
//! A process none of them matches belongs to no job.

use anyhow::{Context, Result};
use regex::Regex;

/// How cgroup paths name jobs: the user's patterns, then the built-in ones.
#[derive(Debug, Clone, Default)]
pub struct Jobs {
    patterns: Vec<Regex>,
}

impl Jobs {
    /// The built-in patterns after `patterns` (regular expressions); an error names the
    /// pattern that does not compile.
    pub fn new(patterns: &[String]) -> Result<Jobs> {
        let patterns = patterns
            .iter()
            .map(|pattern| {
                Regex::new(pattern).with_context(|| {
                    format!("--job-pattern {pattern:?} is not a regular expression")
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Jobs { patterns })
    }

    /// The job of a cgroup path, `None` when no pattern matches it.
    pub fn of(&self, cgroup: &str) -> Option<String> {
        for pattern in &self.patterns {
            if let Some(captures) = pattern.captures(cgroup) {
                let name = captures.get(1).or_else(|| captures.get(0))?;
                return Some(name.as_str().to_string());
            }
        }
        let parts: Vec<&str> = cgroup.split('/').filter(|part| !part.is_empty()).collect();
        let slurm = parts.iter().find_map(|part| {
            let id = part.strip_prefix("job_")?;
            id.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| format!("job {id}"))
        });
        let pod = || {
            parts.iter().find_map(|part| {
                let slice = part.strip_suffix(".slice")?;
                let (_, uid) = slice.rsplit_once("-pod")?;
                (!uid.is_empty()).then(|| format!("pod {uid}"))
            })
        };
        let container = || parts.iter().rev().find_map(|part| container_id(part));
        let service = || {
            parts.iter().rev().find_map(|part| {
                let name = part.strip_suffix(".service")?;
                // A template instance keeps its instance: getty@tty1.
                (!name.is_empty()).then(|| format!("service {name}"))
            })
        };
        slurm.or_else(pod).or_else(container).or_else(service)
    }
}

/// `container <id>` for a container runtime's scope (or a bare id), its id cut to the
/// 12 digits `docker ps` shows.
fn container_id(part: &str) -> Option<String> {
    let scope = part.strip_suffix(".scope").unwrap_or(part);
    let id = ["docker-", "libpod-", "cri-containerd-", "crio-"]
        .iter()
        .find_map(|prefix| scope.strip_prefix(prefix))
        .unwrap_or(scope);
    let hex = id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| format!("container {}", &id[..12]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_patterns_name_slurm_jobs_pods_containers_and_services() {
        let jobs = Jobs::new(&[]).expect("no patterns");
        let id = "0123456789abcdef".repeat(4);
        let cases = [
            (
                "/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0",
                Some("job 4711"),
            ),
            ("/slurm/uid_1000/job_12/step_batch", Some("job 12")),
            (
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c.slice/cri-containerd-x.scope",
                Some("pod 1a2b_3c"),
            ),
            (
                &format!("/system.slice/docker-{id}.scope"),
                Some("container 0123456789ab"),
            ),
            (
                &format!("/machine.slice/libpod-{id}.scope/container"),
                Some("container 0123456789ab"),
            ),
            ("/system.slice/nginx.service", Some("service nginx")),
            (
                "/system.slice/system-getty.slice/getty@tty1.service",
                Some("service getty@tty1"),
            ),
            ("/user.slice/user-1000.slice/session-3.scope", None),
            ("/job_x/a", None),
            ("/", None),
        ];
        for (cgroup, job) in cases {
            assert_eq!(jobs.of(cgroup).as_deref(), job, "{cgroup}");
        }
    }

    #[test]
    fn user_patterns_come_first_and_bad_ones_are_refused() {
        let jobs = Jobs::new(&["lsf-job-([0-9]+)".into(), "batch/[a-z]+".into()])
            .expect("patterns compile");
        assert_eq!(jobs.of("/lsf/lsf-job-77/x").as_deref(), Some("77"));
        assert_eq!(jobs.of("/batch/night/x").as_deref(), Some("batch/night"));
        assert_eq!(
            jobs.of("/system.slice/slurmstepd.scope/job_5").as_deref(),
            Some("job 5")
        );
        let error = Jobs::new(&["job_(".into()]).expect_err("unbalanced");
        assert!(format!("{error:#}").contains("--job-pattern \"job_(\""));
    }
}
