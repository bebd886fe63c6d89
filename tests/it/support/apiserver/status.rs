//! `metav1.Status` error bodies and field errors, worded as k8s.io/apimachinery words them
//! (pkg/api/errors/errors.go, pkg/util/validation/field/errors.go), so clients that parse the
//! `reason`, `code` and `details` see what a real API server sends.

use serde_json::{Value, json};

use super::resources::ResourceType;

/// An error answer: the HTTP status code and the `Status` object sent as its body.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status code (also `Status.code`).
    pub code: u16,
    /// The whole `Status` object.
    pub body: Value,
}

impl ApiError {
    fn new(code: u16, reason: &str, message: String, details: Option<Value>) -> Self {
        let mut body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        });
        if let Some(details) = details {
            body["details"] = details;
        }
        ApiError { code, body }
    }

    /// The `message` of the Status.
    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }

    /// 404 `<resource>.<group> "name" not found`.
    /// What kube-apiserver answers for a path inside a served group version that no handler
    /// serves (apimachinery's `NewNotFound` without a name: "the server could not find the
    /// requested resource").
    pub fn resource_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource".to_string(),
            Some(json!({})),
        )
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", rt.qualified_resource()),
            Some(details(rt, name)),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", rt.qualified_resource()),
            Some(details(rt, name)),
        )
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                rt.qualified_resource()
            ),
            Some(details(rt, name)),
        )
    }

    /// 409 Conflict from server-side apply (`NewApplyConflict`), one cause per field.
    pub fn apply_conflict(message: String, causes: Vec<Value>) -> Self {
        Self::new(409, "Conflict", message, Some(json!({ "causes": causes })))
    }

    /// 422 Invalid: `<Kind>.<group> "name" is invalid: <errors>`.
    pub fn invalid(rt: &ResourceType, name: &str, errors: &[FieldError]) -> Self {
        let aggregate = if errors.len() == 1 {
            errors[0].to_string()
        } else {
            let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
            format!("[{}]", all.join(", "))
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.kind.cause_type(), "message": e.body(), "field": e.field}))
            .collect();
        let mut d = json!({"name": name, "kind": rt.kind, "causes": causes});
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {aggregate}", rt.qualified_kind()),
            Some(d),
        )
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into(), None)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(verb: &str, rt: &ResourceType) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "{verb} is not supported on resources of kind \"{}\"",
                rt.qualified_resource()
            ),
            None,
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml; got {content_type:?}"
            ),
            None,
        )
    }

    /// 410 Expired (`too old resource version: X (Y)`), sent in a watch ERROR event or as a list answer.
    pub fn expired(message: String) -> Self {
        Self::new(410, "Expired", message, None)
    }

    /// 500 InternalError.
    pub fn internal(message: &str) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
            Some(json!({"causes": [{"message": message}]})),
        )
    }

    /// 503 ServiceUnavailable.
    pub fn service_unavailable(message: &str) -> Self {
        Self::new(503, "ServiceUnavailable", message.to_string(), None)
    }

    /// 403 from the authorizer: `<resource>.<group> is forbidden: User "system:anonymous" cannot
    /// <verb> resource "<resource>" in API group "<group>" at the cluster scope` (or `in the
    /// namespace "<ns>"`), as k8s.io/apiserver's authorization filter words it
    /// (`responsewriters.Forbidden`, `errors.NewForbidden`); a request that names an object (a
    /// get, update or delete; not a create) has its name after the resource and in the details.
    pub fn forbidden_request(
        verb: &str,
        rt: &ResourceType,
        ns: Option<&str>,
        name: Option<&str>,
    ) -> Self {
        let scope = match ns {
            Some(ns) if !ns.is_empty() => format!("in the namespace \"{ns}\""),
            _ => "at the cluster scope".to_string(),
        };
        let object = match name {
            Some(name) => format!("{} \"{name}\"", rt.qualified_resource()),
            None => rt.qualified_resource(),
        };
        let mut details = json!({"group": rt.group, "kind": rt.plural});
        if let Some(name) = name {
            details["name"] = json!(name);
        }
        Self::new(
            403,
            "Forbidden",
            format!(
                "{object} is forbidden: User \"system:anonymous\" cannot {verb} resource \"{}\" in API group \"{}\" {scope}",
                rt.plural, rt.group
            ),
            Some(details),
        )
    }

    /// A ValidatingAdmissionPolicy's denial, as k8s.io/apiserver's validating policy
    /// dispatcher builds it: `admission.NewForbidden` (`<resource>.<group> "<name>" is forbidden:
    /// ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>`),
    /// then the validation's reason (`Invalid` when it sets none, so 422; `Forbidden` gives
    /// 403) and the message once more as a cause.
    pub fn admission_denied(
        rt: &ResourceType,
        name: &str,
        policy: &str,
        binding: &str,
        message: &str,
        forbidden: bool,
    ) -> Self {
        let denial = format!(
            "ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}"
        );
        let (code, reason) = if forbidden {
            (403, "Forbidden")
        } else {
            (422, "Invalid")
        };
        let mut d = details(rt, name);
        d["causes"] = json!([{ "message": denial }]);
        Self::new(
            code,
            reason,
            format!(
                "{} \"{name}\" is forbidden: {denial}",
                rt.qualified_resource()
            ),
            Some(d),
        )
    }

    /// 401, as the authentication filter answers a request whose credentials it refuses.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".to_string(), None)
    }

    /// 403 for a path that is not a resource.
    pub fn forbidden_path() -> Self {
        Self::new(
            403,
            "Forbidden",
            "forbidden: User \"system:anonymous\" cannot get path".to_string(),
            None,
        )
    }
}

fn details(rt: &ResourceType, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": rt.plural});
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    d
}

/// The kinds of field error, with apimachinery's names for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `Required value`.
    Required,
    /// `Invalid value`.
    Invalid,
    /// `Duplicate value`.
    Duplicate,
    /// `Too long`.
    TooLong,
    /// `Too many`.
    TooMany,
    /// `Forbidden`.
    Forbidden,
}

impl FieldErrorKind {
    fn label(self) -> &'static str {
        match self {
            Self::Required => "Required value",
            Self::Invalid => "Invalid value",
            Self::Duplicate => "Duplicate value",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
            Self::Forbidden => "Forbidden",
        }
    }

    fn cause_type(self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::Duplicate => "FieldValueDuplicate",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::Forbidden => "FieldValueForbidden",
        }
    }
}

/// One validation failure at a field path (`field.Error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// What is wrong.
    pub kind: FieldErrorKind,
    /// The field path, e.g. `spec.devices[0].attributes[decodeH264]`.
    pub field: String,
    /// The offending value as apimachinery prints it (strings quoted), if it is shown.
    pub value: Option<String>,
    /// The explanation.
    pub detail: String,
}

impl FieldError {
    /// A `Required value` error.
    pub fn required(field: &str, detail: &str) -> Self {
        Self::make(FieldErrorKind::Required, field, None, detail)
    }
    /// An `Invalid value: "x"` error for a string value.
    pub fn invalid_str(field: &str, value: &str, detail: &str) -> Self {
        Self::make(
            FieldErrorKind::Invalid,
            field,
            Some(format!("{value:?}")),
            detail,
        )
    }
    /// An `Invalid value: <raw>` error for a value printed as given (numbers, Go structs).
    pub fn invalid_raw(field: &str, value: String, detail: &str) -> Self {
        Self::make(FieldErrorKind::Invalid, field, Some(value), detail)
    }
    /// A `Duplicate value: "x"` error.
    pub fn duplicate(field: &str, value: &str) -> Self {
        Self::make(
            FieldErrorKind::Duplicate,
            field,
            Some(format!("{value:?}")),
            "",
        )
    }
    /// A `Too long: may not be more than N bytes` error (the value is omitted, as upstream does).
    pub fn too_long(field: &str, max: usize) -> Self {
        Self::make(
            FieldErrorKind::TooLong,
            field,
            None,
            &format!("may not be more than {max} bytes"),
        )
    }
    /// A `Too many: N: must have at most M items` error.
    pub fn too_many(field: &str, actual: usize, max: usize) -> Self {
        Self::make(
            FieldErrorKind::TooMany,
            field,
            Some(actual.to_string()),
            &format!("must have at most {max} items"),
        )
    }
    /// A `Forbidden` error.
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self::make(FieldErrorKind::Forbidden, field, None, detail)
    }

    fn make(kind: FieldErrorKind, field: &str, value: Option<String>, detail: &str) -> Self {
        FieldError {
            kind,
            field: field.to_string(),
            value,
            detail: detail.to_string(),
        }
    }

    /// `ErrorBody()`: the message without the field path (used in `details.causes[].message`).
    pub fn body(&self) -> String {
        let mut s = self.kind.label().to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}
