//! Why the trainer could not do what it was asked: each a variant, with
//! the HTTP status the admin routes answer it with.

use crate::error::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("the trainer is not running")]
    NotRunning,
    #[error("the trainer stopped before answering")]
    NoAnswer,
    /// No step runs here (`learning.enabled: false`, a listed agent's
    /// mode): why.
    #[error("nothing trains: {0}")]
    NothingTrains(String),
    /// Distillation's teacher cannot be used: why.
    #[error("opd: nothing trains: {0}")]
    TeacherRefused(super::opd::TeacherError),
    #[error("training is not paused")]
    NotPaused,
    /// Another instance sharing the store leads this run's training (its
    /// id, if known): steps run there.
    #[error("another instance leads this run's training ({0}): steps run there")]
    NotLeader(String),
    #[error("training is paused: {0}; `metaclaw train resume` goes on")]
    Paused(String),
    #[error("opd: the student's tokenizer is not loaded yet, so the teacher cannot be checked")]
    TeacherUnchecked,
    /// Distillation's teacher failed.
    #[error(transparent)]
    Teacher(super::opd::TeacherError),
    #[error("no step up to {0} saved both its training state and its sampler (rl.save_every)")]
    NothingSavedBefore(i64),
    #[error("no training run")]
    NoRun,
    /// The store cannot be opened.
    #[error("{0}")]
    Store(String),
    /// A record cannot be read or written: which, and why.
    #[error("{what}: {error}")]
    Record { what: &'static str, error: String },
    /// The training service, in its own words.
    #[error(transparent)]
    Service(#[from] crate::tinker::Error),
    /// The training service, about one thing: what, and its words.
    #[error("{what}: {error}")]
    ServiceAbout {
        what: String,
        error: crate::tinker::Error,
    },
    /// The student cannot serve weights (on the serving runtime).
    #[error("{what}: {error}")]
    Serving { what: String, error: String },
    #[error("canary.weights is off")]
    CanaryOff,
    #[error("the step saved no training state")]
    NoSavedState,
    #[error("the student is not serving (not connected)")]
    NotServing,
    #[error("the served weights ({0}) were not saved as a training state")]
    NotSavedAsState(String),
    #[error("the candidate cannot be sampled: {0}")]
    CandidateUnsampled(String),
    #[error("no weights are under test")]
    NoTest,
    #[error("its record is gone")]
    TestRecordGone,
    #[error("canary.weights is off since")]
    CanaryOffSince,
    #[error("the run's training state is no longer step {0}'s")]
    StateMoved(i64),
    #[error("the run no longer serves step {0}'s weights")]
    NoLongerServes(i64),
    /// The student's serving runtime: saved weights it cannot serve.
    #[error(transparent)]
    Sampler(#[from] crate::policy::SamplerError),
    #[error("the swap stopped: {0}")]
    SwapStopped(String),
    #[error("experiment {0} is not the weights under test")]
    NotUnderTest(i64),
    #[error("experiment {0} is gone")]
    ExperimentGone(i64),
}

impl TrainError {
    /// The store could not be opened (`{e:#}`: with its causes).
    pub(crate) fn store<E: std::fmt::Display>(e: E) -> Self {
        Self::Store(format!("{e:#}"))
    }

    /// A record (`what`) could not be read or written.
    pub(crate) fn record<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> Self + Copy {
        move |e| Self::Record {
            what,
            error: format!("{e:#}"),
        }
    }

    /// The training service failed about `what`.
    pub(crate) fn about(what: impl Into<String>) -> impl FnOnce(crate::tinker::Error) -> Self {
        let what = what.into();
        move |error| Self::ServiceAbout { what, error }
    }
}

/// The admin routes' answer: a failure of the training service, the
/// student's serving or the distillation teacher is a bad gateway (in its
/// own words), a state that forbids the action a conflict, what does not
/// exist not found, the store's failures an internal error.
impl From<TrainError> for ApiError {
    fn from(e: TrainError) -> Self {
        match e {
            TrainError::Service(_)
            | TrainError::ServiceAbout { .. }
            | TrainError::Serving { .. }
            | TrainError::Sampler(_)
            | TrainError::SwapStopped(_)
            | TrainError::CandidateUnsampled(_)
            | TrainError::TeacherRefused(_)
            | TrainError::Teacher(_) => ApiError::TrainingFailed(e.to_string()),
            TrainError::NothingTrains(_)
            | TrainError::NoRun
            | TrainError::NoTest
            | TrainError::ExperimentGone(_) => ApiError::NotFound(e.to_string()),
            TrainError::Store(_) | TrainError::Record { .. } => ApiError::Internal(e.to_string()),
            TrainError::NotRunning
            | TrainError::NoAnswer
            | TrainError::NotPaused
            | TrainError::NotLeader(_)
            | TrainError::Paused(_)
            | TrainError::TeacherUnchecked
            | TrainError::NothingSavedBefore(_)
            | TrainError::CanaryOff
            | TrainError::NoSavedState
            | TrainError::NotServing
            | TrainError::NotSavedAsState(_)
            | TrainError::NotUnderTest(_)
            | TrainError::TestRecordGone
            | TrainError::CanaryOffSince
            | TrainError::StateMoved(_)
            | TrainError::NoLongerServes(_) => ApiError::Conflict(e.to_string()),
        }
    }
}
