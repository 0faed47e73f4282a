//! The `build_versions` table: the versions each build of a pipeline job
//! used (its gets) and made (its puts), and the questions scheduling asks
//! of them and of `resource_versions`. Every query reads a page at a time:
//! no question loads a resource's whole history.

use serde_json::Value;

pub(crate) use super::states::Direction;
use crate::db::Versions;
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;

/// A build that used or made a version: (version as stored, build id, job,
/// build number, rerun number, direction).
pub(crate) type VersionBuildRow = (String, i64, String, Option<i64>, Option<i64>, String);

/// A job's place: team, pipeline name, job name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobAt<'a> {
    /// The team.
    pub team: &'a str,
    /// The pipeline's name.
    pub pipeline: &'a str,
    /// The job's name.
    pub job: &'a str,
}

/// A resource's versions: where they are kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VersionsAt<'a> {
    /// `resource_versions.team`: a scope (a team's one-off or shared
    /// history, or a pipeline resource's; see `crate::resources::scope`).
    pub scope: &'a str,
    /// The resource config's hash.
    pub config: &'a str,
}

/// A version and its place in the order of its resource's versions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OrderedVersion {
    /// The version (a JSON object), as stored.
    pub version: String,
    /// Higher: newer.
    pub check_order: i64,
}

impl Versions<'_> {
    /// Records that build `build` used (`In`) or made (`Out`) `version` of
    /// `resource` in step `name`.
    pub(crate) async fn record_build_version(
        &self,
        build: i64,
        direction: Direction,
        name: &str,
        resource: &str,
        version: &Value,
    ) -> Result<(), EngineError> {
        sqlx::query(
            "INSERT INTO build_versions (build_id, direction, name, resource, version) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (build_id, direction, name) DO UPDATE SET resource = excluded.resource, version = excluded.version",
        )
        .bind(build)
        .bind(direction.as_str())
        .bind(name)
        .bind(resource)
        .bind(version.to_string())
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Where the versions of resource `resource` (config `config`) of
    /// build `build`'s pipeline are kept, when the build is a job build of
    /// a stored pipeline that has that resource with that config: where
    /// its puts' versions go (else the team's one-off history).
    pub(crate) async fn output_scope(
        &self,
        build: i64,
        resource: &str,
        config: &str,
    ) -> Result<Option<String>, EngineError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT r.scope FROM builds b \
             JOIN pipelines p ON p.team = b.team AND p.name = b.pipeline \
             JOIN pipeline_resources r ON r.pipeline_id = p.id AND r.name = $2 AND r.config = $3 \
             WHERE b.id = $1",
        )
        .bind(build)
        .bind(resource)
        .bind(config)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|(s,)| s))
    }

    /// What build `build` used and made: (direction, step, resource,
    /// version), inputs first.
    pub(crate) async fn build_versions(
        &self,
        build: i64,
    ) -> Result<Vec<(String, String, String, String)>, EngineError> {
        Ok(sqlx::query_as(
            "SELECT direction, name, resource, version FROM build_versions WHERE build_id = $1 ORDER BY direction, name",
        )
        .bind(build)
        .fetch_all(self.db.pool())
        .await?)
    }

    /// The newest build of a job (by id, any status) and the inputs it was
    /// given (step → version).
    pub(crate) async fn last_job_build(
        &self,
        at: JobAt<'_>,
    ) -> Result<Option<(i64, Vec<(String, String)>)>, EngineError> {
        let rows: Vec<(i64, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT b.id, bv.name, bv.version FROM \
             (SELECT id FROM builds WHERE team = $1 AND pipeline = $2 AND job = $3 AND waiting IS NULL \
             ORDER BY id DESC LIMIT 1) b \
             LEFT JOIN build_versions bv ON bv.build_id = b.id AND bv.direction = $4",
        )
        .bind(at.team)
        .bind(at.pipeline)
        .bind(at.job)
        .bind(Direction::In.as_str())
        .fetch_all(self.db.pool())
        .await?;
        let Some(&(id, _, _)) = rows.first() else {
            return Ok(None);
        };
        let inputs = rows
            .into_iter()
            .filter_map(|(_, name, version)| Some((name?, version?)))
            .collect();
        Ok(Some((id, inputs)))
    }

    /// The newest build of the job (not one still waiting for its inputs)
    /// that was given `version` of `resource` as input `name`, if any: a
    /// version is a trigger's first occurrence for the job when none was
    /// (Concourse's `IsFirstOccurrence`).
    pub(crate) async fn job_build_given(
        &self,
        at: JobAt<'_>,
        name: &str,
        resource: &str,
        version: &str,
    ) -> Result<Option<i64>, EngineError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT bv.build_id FROM build_versions bv CROSS JOIN builds b \
             WHERE bv.resource = $1 AND bv.version = $2 AND bv.direction = $7 AND bv.name = $3 \
             AND b.id = bv.build_id AND b.team = $4 AND b.pipeline = $5 AND b.job = $6 \
             AND b.waiting IS NULL ORDER BY bv.build_id DESC LIMIT 1",
        )
        .bind(resource)
        .bind(version)
        .bind(name)
        .bind(at.team)
        .bind(at.pipeline)
        .bind(at.job)
        .bind(Direction::In.as_str())
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|(id,)| id))
    }

    /// The newest place (check order) among the versions the job's builds
    /// used as input `name`: where `version: every` goes on from.
    pub(crate) async fn last_used_order(
        &self,
        at: JobAt<'_>,
        name: &str,
        versions: VersionsAt<'_>,
    ) -> Result<Option<i64>, EngineError> {
        let (order,): (Option<i64>,) = sqlx::query_as(
            // The job's builds first (see `passed_versions_page`).
            "SELECT MAX(v.check_order) FROM builds b \
             CROSS JOIN build_versions bv CROSS JOIN resource_versions v \
             WHERE b.team = $1 AND b.pipeline = $2 AND b.job = $3 \
             AND bv.build_id = b.id AND bv.direction = $7 AND bv.name = $4 \
             AND v.team = $5 AND v.config = $6 AND v.version = bv.version",
        )
        .bind(at.team)
        .bind(at.pipeline)
        .bind(at.job)
        .bind(name)
        .bind(versions.scope)
        .bind(versions.config)
        .bind(Direction::In.as_str())
        .fetch_one(self.db.pool())
        .await?;
        Ok(order)
    }

    /// A page of a resource's versions, not disabled in pipeline
    /// `pipeline_id` for `resource`: newest first below `before` (none:
    /// from the newest), or oldest first above `after`.
    pub(crate) async fn versions_page(
        &self,
        versions: VersionsAt<'_>,
        (pipeline_id, resource): (i64, &str),
        bound: Bound,
        limit: i64,
    ) -> Result<Vec<OrderedVersion>, EngineError> {
        let (cmp, order, edge) = bound.sql();
        let rows: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT v.version, v.check_order FROM resource_versions v \
             WHERE v.team = $1 AND v.config = $2 AND v.check_order {cmp} $3 \
             AND NOT EXISTS (SELECT 1 FROM disabled_versions d WHERE d.pipeline_id = $4 AND d.resource = $5 AND d.version = v.version) \
             ORDER BY v.check_order {order} LIMIT $6"
        ))
        .bind(versions.scope)
        .bind(versions.config)
        .bind(edge)
        .bind(pipeline_id)
        .bind(resource)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await?;
        Ok(ordered(rows))
    }

    /// A page of a resource's versions, disabled ones too, newest first
    /// below `before`.
    pub(crate) async fn all_versions_page(
        &self,
        scope: &str,
        config: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<OrderedVersion>, EngineError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT version, check_order FROM resource_versions WHERE team = $1 AND config = $2 AND check_order < $3 \
             ORDER BY check_order DESC LIMIT $4",
        )
        .bind(scope)
        .bind(config)
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(self.db.pool())
        .await?;
        Ok(ordered(rows))
    }

    /// A page of the versions of `resource` that succeeded builds of job
    /// `upstream` used or made (`passed: [upstream]`), not disabled in
    /// pipeline `pipeline_id`, ordered as [`Versions::versions_page`].
    pub(crate) async fn passed_versions_page(
        &self,
        upstream: JobAt<'_>,
        versions: VersionsAt<'_>,
        (pipeline_id, resource): (i64, &str),
        bound: Bound,
        limit: i64,
    ) -> Result<Vec<OrderedVersion>, EngineError> {
        let (cmp, order, edge) = bound.sql();
        let rows: Vec<(String, i64)> = sqlx::query_as(&format!(
            // From the upstream job's builds to the versions they had (a
            // page of the resource's versions scanned for the few that went
            // through it would read its whole history): SQLite takes a
            // CROSS JOIN's tables in the order written.
            "SELECT v.version, v.check_order FROM \
             (SELECT DISTINCT bv.version FROM builds b \
              JOIN build_versions bv ON bv.build_id = b.id AND bv.resource = $1 \
              WHERE b.team = $4 AND b.pipeline = $5 AND b.job = $6 AND b.status = $7) p \
             CROSS JOIN resource_versions v \
             WHERE v.team = $2 AND v.config = $3 AND v.version = p.version AND v.check_order {cmp} $8 \
             AND NOT EXISTS (SELECT 1 FROM disabled_versions d WHERE d.pipeline_id = $9 AND d.resource = $1 AND d.version = v.version) \
             ORDER BY v.check_order {order} LIMIT $10"
        ))
        .bind(resource)
        .bind(versions.scope)
        .bind(versions.config)
        .bind(upstream.team)
        .bind(upstream.pipeline)
        .bind(upstream.job)
        .bind(BuildStatus::Succeeded.as_str())
        .bind(edge)
        .bind(pipeline_id)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await?;
        Ok(ordered(rows))
    }

    /// A page of what succeeded builds of job `upstream` made and used of
    /// `resource` (`passed: [upstream]` with `version: latest`), as
    /// Concourse's resolver walks them: builds newest first, and within a
    /// build its outputs (puts) before its inputs (gets); versions not in
    /// the resource's history or disabled in pipeline `pipeline_id` left
    /// out. Read after `after` (none: from the newest build); a version
    /// appears once per build that had it.
    pub(crate) async fn passed_by_build_page(
        &self,
        upstream: JobAt<'_>,
        versions: VersionsAt<'_>,
        (pipeline_id, resource): (i64, &str),
        after: Option<&BuildCursor>,
        limit: i64,
    ) -> Result<Vec<(OrderedVersion, BuildCursor)>, EngineError> {
        let start = BuildCursor {
            build: i64::MAX,
            direction: String::new(),
            name: String::new(),
        };
        let after = after.unwrap_or(&start);
        let rows: Vec<(i64, String, String, String, i64)> = sqlx::query_as(
            // The upstream job's builds first, newest first (its index),
            // then what each had of the resource, then its place in the
            // history: SQLite takes a CROSS JOIN's tables in the order
            // written. 'out' > 'in': outputs first.
            "SELECT b.id, bv.direction, bv.name, v.version, v.check_order FROM builds b \
             CROSS JOIN build_versions bv CROSS JOIN resource_versions v \
             WHERE b.team = $4 AND b.pipeline = $5 AND b.job = $6 AND b.status = $7 AND b.id <= $8 \
             AND bv.build_id = b.id AND bv.resource = $1 \
             AND (b.id < $8 OR bv.direction < $9 OR (bv.direction = $9 AND bv.name < $10)) \
             AND v.team = $2 AND v.config = $3 AND v.version = bv.version \
             AND NOT EXISTS (SELECT 1 FROM disabled_versions d WHERE d.pipeline_id = $11 AND d.resource = $1 AND d.version = v.version) \
             ORDER BY b.id DESC, bv.direction DESC, bv.name DESC LIMIT $12",
        )
        .bind(resource)
        .bind(versions.scope)
        .bind(versions.config)
        .bind(upstream.team)
        .bind(upstream.pipeline)
        .bind(upstream.job)
        .bind(BuildStatus::Succeeded.as_str())
        .bind(after.build)
        .bind(&after.direction)
        .bind(&after.name)
        .bind(pipeline_id)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(build, direction, name, version, check_order)| {
                (
                    OrderedVersion {
                        version,
                        check_order,
                    },
                    BuildCursor {
                        build,
                        direction,
                        name,
                    },
                )
            })
            .collect())
    }

    /// The place of `version` among a resource's versions, if it was
    /// found by a check.
    pub(crate) async fn version_order(
        &self,
        versions: VersionsAt<'_>,
        version: &str,
    ) -> Result<Option<i64>, EngineError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT check_order FROM resource_versions WHERE team = $1 AND config = $2 AND version = $3",
        )
        .bind(versions.scope)
        .bind(versions.config)
        .bind(version)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|(o,)| o))
    }

    /// The succeeded builds of job `at` that used or made `version` of
    /// `resource`: what `passed: [job]` asks of a candidate.
    pub(crate) async fn passed_builds(
        &self,
        at: JobAt<'_>,
        resource: &str,
        version: &str,
    ) -> Result<Vec<i64>, EngineError> {
        let rows: Vec<(i64,)> = sqlx::query_as(
            "SELECT DISTINCT b.id FROM build_versions bv JOIN builds b ON b.id = bv.build_id \
             WHERE bv.resource = $1 AND bv.version = $2 AND b.team = $3 AND b.pipeline = $4 AND b.job = $5 AND b.status = $6",
        )
        .bind(resource)
        .bind(version)
        .bind(at.team)
        .bind(at.pipeline)
        .bind(at.job)
        .bind(BuildStatus::Succeeded.as_str())
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// Whether `version` of `resource` is disabled in pipeline `pipeline_id`.
    pub(crate) async fn version_disabled(
        &self,
        pipeline_id: i64,
        resource: &str,
        version: &str,
    ) -> Result<bool, EngineError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT 1 FROM disabled_versions WHERE pipeline_id = $1 AND resource = $2 AND version = $3",
        )
        .bind(pipeline_id)
        .bind(resource)
        .bind(version)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.is_some())
    }

    /// The builds of pipeline `pipeline` of `team` that used or made each
    /// of `versions` (as stored) of `resource`: (version, build id, job,
    /// build number, rerun number, direction), newest build first, at
    /// most `per_version` of each version.
    pub(crate) async fn builds_of_versions(
        &self,
        (team, pipeline): (&str, &str),
        resource: &str,
        versions: &[String],
        per_version: usize,
    ) -> Result<Vec<VersionBuildRow>, EngineError> {
        if versions.is_empty() {
            return Ok(vec![]);
        }
        // One bounded walk per version down the index on (resource,
        // version, build_id), newest build first, all in one statement:
        // a version used by thousands of builds reads `per_version` rows.
        let walks = (0..versions.len())
            .map(|i| {
                format!(
                    "SELECT * FROM (SELECT bv.version, b.id, b.job, b.build_number, b.rerun_number, bv.direction \
                     FROM build_versions bv JOIN builds b ON b.id = bv.build_id \
                     WHERE bv.resource = $1 AND bv.version = ${} AND b.team = $2 AND b.pipeline = $3 \
                     ORDER BY bv.build_id DESC LIMIT {per_version}) AS v{i}",
                    i + 4
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let sql = format!("SELECT * FROM ({walks}) AS walked ORDER BY id DESC");
        let mut q = sqlx::query_as(&sql)
            .bind(resource)
            .bind(team)
            .bind(pipeline);
        for v in versions {
            q = q.bind(v);
        }
        Ok(q.fetch_all(self.db.pool()).await?)
    }

    /// The versions (as stored) of `resource` disabled in pipeline
    /// `pipeline_id`, in one statement (a page of versions asks once, not
    /// once per version).
    pub(crate) async fn disabled_versions(
        &self,
        pipeline_id: i64,
        resource: &str,
    ) -> Result<std::collections::HashSet<String>, EngineError> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT version FROM disabled_versions WHERE pipeline_id = $1 AND resource = $2",
        )
        .bind(pipeline_id)
        .bind(resource)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows.into_iter().map(|(v,)| v).collect())
    }
}

/// A place in the walk of [`Versions::passed_by_build_page`]: a build, and a
/// step's version in it (direction, step name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BuildCursor {
    /// The build's id.
    pub build: i64,
    /// `out` or `in`.
    pub direction: String,
    /// The step's name.
    pub name: String,
}

/// Which side of a place in the order a page of versions is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// Newest first, older than this place (none: from the newest).
    Before(Option<i64>),
    /// Oldest first, newer than this place.
    After(i64),
}

impl Bound {
    /// The comparison, the order and the edge of a page's query.
    fn sql(self) -> (&'static str, &'static str, i64) {
        match self {
            Bound::Before(b) => ("<", "DESC", b.unwrap_or(i64::MAX)),
            Bound::After(a) => (">", "ASC", a),
        }
    }
}

/// Rows of (version, check order) as [`OrderedVersion`]s.
fn ordered(rows: Vec<(String, i64)>) -> Vec<OrderedVersion> {
    rows.into_iter()
        .map(|(version, check_order)| OrderedVersion {
            version,
            check_order,
        })
        .collect()
}
