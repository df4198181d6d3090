//! The native API's error reply, which the gates in front of every route
//! (auth, origin, the dashboard's) answer with too.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::error::Error;
use crate::wire::{ErrorBody, ErrorReply};

/// An error reply of the native API.
#[derive(Debug)]
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", message)
    }
    pub(crate) fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.code.to_owned(),
            message: self.message.clone(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let reply = ErrorReply { error: self.body() };
        (self.status, Json(reply)).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::Invalid(m) => ApiError::invalid(m),
            Error::NotFound(_) | Error::NoBatch(_) | Error::NoFlow(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string())
            }
            Error::Conflict(_) => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            Error::Busy(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", e.to_string()),
            Error::StaleLease(_) => {
                ApiError::new(StatusCode::CONFLICT, "stale_lease", e.to_string())
            }
            Error::Cancelled(_) => ApiError::new(StatusCode::CONFLICT, "cancelled", e.to_string()),
            Error::Full => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "redis_full", e.to_string())
            }
            Error::Evicting(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "redis_evicts",
                e.to_string(),
            ),
            Error::Degraded { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "degraded", e.to_string())
            }
            Error::Refused { .. } | Error::NoScripts { refused: true, .. } => {
                tracing::warn!(error = %e, "redis refused a command");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "redis_refused",
                    e.to_string(),
                )
            }
            Error::Unknown { .. } | Error::Unconfirmed { .. } => {
                tracing::warn!(error = %e, "outcome unknown");
                ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "outcome_unknown",
                    e.to_string(),
                )
            }
            Error::Timeout { .. }
            | Error::Late { .. }
            | Error::Moved { .. }
            | Error::Unreplicated { .. }
            | Error::LeaseUnconfirmed { .. }
            | Error::NoScripts { .. }
            | Error::Redis { .. } => {
                tracing::warn!(error = %e, "redis unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    e.to_string(),
                )
            }
            Error::Protocol { .. } => {
                tracing::error!(error = %e, "unexpected reply");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            }
        }
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;
