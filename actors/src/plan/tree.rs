//! The plan tree: steps, composites (`do`, `in_parallel`), modifiers and
//! hooks, generic over what stands at its leaves. Translation makes a tree
//! of step definitions ([`super::StepDef`]); the steps module turns each
//! into a runnable step, and the walker (`build/`) runs that tree.

use std::time::Duration;

use gantry_wire::events::PlanNode;

/// What a leaf of a plan is known by in events: its step's name.
pub trait Leaf {
    /// The step's name.
    fn name(&self) -> &str;

    /// The step's kind (`task`, `get` ...), when known before it runs.
    fn step_kind(&self) -> Option<&'static str> {
        None
    }

    /// What a task step runs: its path then its arguments.
    fn argv(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A plan: a tree of steps (`S`), composites (`do`, `in_parallel`), and
/// modifiers and hooks (`try`, `attempts`, `timeout`, `on_success` ...
/// `ensure`), with Concourse's semantics (see `build/walker.rs`). Step
/// kinds need no variant here.
#[derive(Clone)]
pub enum Plan<S> {
    /// One step, placed on a worker and run there.
    Step(S),
    /// Plans run one after another; the first that does not succeed ends it.
    Do(Vec<Plan<S>>),
    /// Plans run at once, at most `limit` at a time (all when `None`), in
    /// order as places free up. Without `fail_fast` all of them run and it
    /// fails when any failed; with it, the first that does not succeed
    /// stops the others and the ones not started yet never start.
    InParallel {
        /// The plans.
        plans: Vec<Plan<S>>,
        /// How many run at once; `None` (or 0): all.
        limit: Option<usize>,
        /// Stop the others at the first that does not succeed.
        fail_fast: bool,
    },
    /// Its plan's failure or error does not fail the build; an abort still
    /// aborts it.
    Try(Box<Plan<S>>),
    /// A plan with hooks, each run in its case after it; `ensure` always,
    /// last. A hook's failure fails the whole (see [`Hooks`]).
    Hooks {
        /// The plan the hooks are on.
        plan: Box<Plan<S>>,
        /// The hooks.
        hooks: Hooks<S>,
    },
    /// Its plan, run again after it fails or errors, until it succeeds or
    /// `attempts` runs were made; an abort ends it.
    Attempts {
        /// The plan.
        plan: Box<Plan<S>>,
        /// How many runs at most (at least 1).
        attempts: u32,
    },
    /// Its plan, stopped when it runs longer than `duration` (SIGTERM, then
    /// SIGKILL after the grace), which then fails with `timed out after ...`.
    Timeout {
        /// The plan.
        plan: Box<Plan<S>>,
        /// How long it may run.
        duration: Duration,
    },
}

/// The hooks of a plan, each a plan of its own (see [`crate::hooks`]).
pub(crate) type Hooks<S> = crate::hooks::Hooks<Plan<S>>;

impl<S: Leaf> Plan<S> {
    /// The step named `name`, wherever it is in the plan.
    pub fn step(&self, name: &str) -> Option<&S> {
        self.steps().into_iter().find(|s| s.name() == name)
    }

    /// Every step of the plan, in the order they appear.
    pub fn steps(&self) -> Vec<&S> {
        let mut steps = Vec::new();
        self.visit(&mut |plan| {
            if let Plan::Step(step) = plan {
                steps.push(step);
            }
        });
        steps
    }

    /// Whether the plan is one step (possibly under modifiers that do not
    /// run it twice at once): what a restarted web node can take over.
    pub fn is_one_step(&self) -> bool {
        self.steps().len() == 1
    }

    /// The plan's children with the suffix each adds to its parent's position.
    pub fn children(&self) -> Vec<(String, &Plan<S>)> {
        match self {
            Plan::Step(_) => Vec::new(),
            Plan::Do(plans) | Plan::InParallel { plans, .. } => plans
                .iter()
                .enumerate()
                .map(|(i, p)| (i.to_string(), p))
                .collect(),
            Plan::Try(plan) | Plan::Attempts { plan, .. } | Plan::Timeout { plan, .. } => {
                vec![("0".to_string(), plan)]
            }
            Plan::Hooks { plan, hooks } => std::iter::once(("plan", plan.as_ref()))
                .chain(hooks.iter())
                .map(|(role, p)| (role.to_string(), p))
                .collect(),
        }
    }

    /// Calls `f` on this plan and every plan inside, parents first.
    fn visit<'a>(&'a self, f: &mut impl FnMut(&'a Plan<S>)) {
        f(self);
        for (_, child) in self.children() {
            child.visit(f);
        }
    }

    /// The plan as the `plan` event describes it, this node at `id`.
    pub fn describe(&self, id: &str) -> PlanNode {
        let mut node = PlanNode {
            id: id.to_string(),
            kind: self.kind().to_string(),
            step: None,
            step_kind: None,
            argv: Vec::new(),
            limit: None,
            fail_fast: false,
            attempts: None,
            timeout_ms: None,
            children: self
                .children()
                .into_iter()
                .map(|(suffix, child)| child.describe(&format!("{id}.{suffix}")))
                .collect(),
        };
        match self {
            Plan::Step(step) => {
                node.step = Some(step.name().to_string());
                node.step_kind = step.step_kind().map(str::to_string);
                node.argv = step.argv();
            }
            Plan::InParallel {
                limit, fail_fast, ..
            } => {
                node.limit = *limit;
                node.fail_fast = *fail_fast;
            }
            Plan::Attempts { attempts, .. } => node.attempts = Some(*attempts),
            Plan::Timeout { duration, .. } => {
                node.timeout_ms = Some(duration.as_millis().try_into().unwrap_or(u64::MAX))
            }
            Plan::Do(_) | Plan::Try(_) | Plan::Hooks { .. } => {}
        }
        node
    }

    /// The kind of node, as events name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Plan::Step(_) => "step",
            Plan::Do(_) => "do",
            Plan::InParallel { .. } => "in_parallel",
            Plan::Try(_) => "try",
            Plan::Hooks { .. } => "hooks",
            Plan::Attempts { .. } => "attempts",
            Plan::Timeout { .. } => "timeout",
        }
    }

    /// The same tree with each leaf turned by `f`.
    pub fn map<T>(self, f: &impl Fn(S) -> T) -> Plan<T> {
        let boxed = |p: Box<Plan<S>>| Box::new(p.map(f));
        match self {
            Plan::Step(s) => Plan::Step(f(s)),
            Plan::Do(plans) => Plan::Do(plans.into_iter().map(|p| p.map(f)).collect()),
            Plan::InParallel {
                plans,
                limit,
                fail_fast,
            } => Plan::InParallel {
                plans: plans.into_iter().map(|p| p.map(f)).collect(),
                limit,
                fail_fast,
            },
            Plan::Try(plan) => Plan::Try(boxed(plan)),
            Plan::Hooks { plan, hooks } => Plan::Hooks {
                plan: boxed(plan),
                hooks: hooks.into_map(|p| p.map(f)),
            },
            Plan::Attempts { plan, attempts } => Plan::Attempts {
                plan: boxed(plan),
                attempts,
            },
            Plan::Timeout { plan, duration } => Plan::Timeout {
                plan: boxed(plan),
                duration,
            },
        }
    }
}

impl<S> Plan<S> {
    /// The same tree with each leaf replaced by the tree `f` makes of it;
    /// the first error `f` answers.
    pub fn try_flat_map<T, E>(self, f: &impl Fn(S) -> Result<Plan<T>, E>) -> Result<Plan<T>, E> {
        let boxed = |p: Box<Plan<S>>| p.try_flat_map(f).map(Box::new);
        let all = |plans: Vec<Plan<S>>| -> Result<Vec<Plan<T>>, E> {
            plans.into_iter().map(|p| p.try_flat_map(f)).collect()
        };
        Ok(match self {
            Plan::Step(s) => f(s)?,
            Plan::Do(plans) => Plan::Do(all(plans)?),
            Plan::InParallel {
                plans,
                limit,
                fail_fast,
            } => Plan::InParallel {
                plans: all(plans)?,
                limit,
                fail_fast,
            },
            Plan::Try(plan) => Plan::Try(boxed(plan)?),
            Plan::Hooks { plan, hooks } => Plan::Hooks {
                plan: boxed(plan)?,
                hooks: hooks.try_into_map(|p| p.try_flat_map(f))?,
            },
            Plan::Attempts { plan, attempts } => Plan::Attempts {
                plan: boxed(plan)?,
                attempts,
            },
            Plan::Timeout { plan, duration } => Plan::Timeout {
                plan: boxed(plan)?,
                duration,
            },
        })
    }
}
