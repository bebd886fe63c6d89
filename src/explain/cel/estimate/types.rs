//! Types as cel-go's checker gives them in the DRA environment, and the overloads of each
//! function the estimate knows.

use super::*;

/// A checked type: what the estimate reads of it.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Ty {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Duration,
    Timestamp,
    Type,
    Dyn,
    /// `google.protobuf.Any`: an attribute's value (dra `attributeType`), dyn to the checker.
    Any,
    /// A type variable not bound yet (the element of `[]`).
    Free,
    Error,
    List(Box<Ty>),
    Map(Box<Ty>, Box<Ty>),
    Optional(Box<Ty>),
    Semver,
    Quantity,
    /// `kubernetes.DRADevice`.
    Device,
}

pub(super) enum Kind {
    Map,
    Struct,
    List,
    TypeParam,
    Other,
}

impl Ty {
    pub(super) fn kind(&self) -> Kind {
        match self {
            Ty::Map(..) => Kind::Map,
            Ty::List(_) => Kind::List,
            Ty::Device | Ty::Semver | Ty::Quantity => Kind::Struct,
            Ty::Free => Kind::TypeParam,
            _ => Kind::Other,
        }
    }
    /// cel-go `isDyn` (and unresolved or erroneous types, which match anything).
    pub(super) fn is_dyn(&self) -> bool {
        matches!(self, Ty::Dyn | Ty::Any | Ty::Free | Ty::Error)
    }
    /// cel-go `isScalar`: its size is 1.
    pub(super) fn is_scalar(&self) -> bool {
        match self {
            Ty::Bool | Ty::Double | Ty::Duration | Ty::Int | Ty::Timestamp | Ty::Uint => true,
            Ty::Optional(t) => t.is_scalar(),
            _ => false,
        }
    }
    /// `Type().Parameters()[0]`, when there are parameters.
    pub(super) fn first_parameter(&self) -> Option<&Ty> {
        match self {
            Ty::List(t) | Ty::Map(t, _) | Ty::Optional(t) => Some(t),
            _ => None,
        }
    }
}

/// A parameter or result type of a declared overload.
#[derive(Clone, Copy)]
pub(super) enum P {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    Dyn,
    Semver,
    Quantity,
    Type,
    A,
    B,
    List(&'static P),
    Map(&'static P, &'static P),
    Opt(&'static P),
}

/// One overload: its id, whether it is called as `x.f()`, its parameters and result.
pub(super) struct Overload {
    pub(super) id: &'static str,
    pub(super) member: bool,
    pub(super) params: &'static [P],
    pub(super) result: P,
}

macro_rules! g {
    ($id:expr, $params:expr, $result:expr) => {
        Overload {
            id: $id,
            member: false,
            params: $params,
            result: $result,
        }
    };
}

macro_rules! m {
    ($id:expr, $params:expr, $result:expr) => {
        Overload {
            id: $id,
            member: true,
            params: $params,
            result: $result,
        }
    };
}

use P::{A, B};
pub(super) const LA: P = P::List(&A);
pub(super) const MAB: P = P::Map(&A, &B);
pub(super) const LS: P = P::List(&P::String);

/// A relation over each comparable pair, in cel-go's declaration order.
macro_rules! relation {
    ($op:literal) => {
        &[
            g!(concat!($op, "_bool"), &[P::Bool, P::Bool], P::Bool),
            g!(concat!($op, "_int64"), &[P::Int, P::Int], P::Bool),
            g!(concat!($op, "_int64_double"), &[P::Int, P::Double], P::Bool),
            g!(concat!($op, "_int64_uint64"), &[P::Int, P::Uint], P::Bool),
            g!(concat!($op, "_uint64"), &[P::Uint, P::Uint], P::Bool),
            g!(
                concat!($op, "_uint64_double"),
                &[P::Uint, P::Double],
                P::Bool
            ),
            g!(concat!($op, "_uint64_int64"), &[P::Uint, P::Int], P::Bool),
            g!(concat!($op, "_double"), &[P::Double, P::Double], P::Bool),
            g!(concat!($op, "_double_int64"), &[P::Double, P::Int], P::Bool),
            g!(
                concat!($op, "_double_uint64"),
                &[P::Double, P::Uint],
                P::Bool
            ),
            g!(concat!($op, "_string"), &[P::String, P::String], P::Bool),
            g!(concat!($op, "_bytes"), &[P::Bytes, P::Bytes], P::Bool),
            g!(
                concat!($op, "_timestamp"),
                &[P::Timestamp, P::Timestamp],
                P::Bool
            ),
            g!(
                concat!($op, "_duration"),
                &[P::Duration, P::Duration],
                P::Bool
            ),
        ]
    };
}

/// `sort` and `@sortByAssociatedKeys`: one overload per comparable type (cel-go ext lists
/// `comparableTypes`, named by the type), of the list's or of the keys' elements.
macro_rules! sorts {
    ($($name:literal => $p:ident),*) => {
        const SORT: &[Overload] = &[$(
            m!(concat!("list_", $name, "_sort"), &[P::List(&P::$p)], P::List(&P::$p))
        ),*];
        const SORT_BY: &[Overload] = &[$(
            m!(concat!("list_", $name, "_sortByAssociatedKeys"), &[LA, P::List(&P::$p)], LA)
        ),*];
    };
}

/// k8s lists' `sum`, `max` and `min`: one overload per type, the first `int`.
macro_rules! typed {
    ($name:ident, $id:literal, $($p:ident),*) => {
        const $name: &[Overload] = &[$(
            m!(concat!("list_", $id), &[P::List(&P::$p)], P::$p)
        ),*];
    };
}

typed!(SUM, "sum", Int, Uint, Double, Duration);
typed!(
    MAX, "max", Int, Uint, Double, Bool, Duration, Timestamp, String, Bytes
);
typed!(
    MIN, "min", Int, Uint, Double, Bool, Duration, Timestamp, String, Bytes
);

sorts!(
    "int" => Int, "uint" => Uint, "double" => Double, "bool" => Bool,
    "google.protobuf.Duration" => Duration, "google.protobuf.Timestamp" => Timestamp,
    "string" => String, "bytes" => Bytes
);

/// The overloads of `function` in the environment of Kubernetes' new expressions, in
/// declaration order (the order matters where cel-go unions result sizes). A function not
/// listed resolves to one overload of its own name with a `dyn` result.
pub(super) fn overloads(function: &str) -> &'static [Overload] {
    match function {
        operators::CONDITIONAL => &[g!("conditional", &[P::Bool, A, A], A)],
        operators::LOGICAL_AND => &[g!("logical_and", &[P::Bool, P::Bool], P::Bool)],
        operators::LOGICAL_OR => &[g!("logical_or", &[P::Bool, P::Bool], P::Bool)],
        operators::LOGICAL_NOT => &[g!("logical_not", &[P::Bool], P::Bool)],
        operators::NOT_STRICTLY_FALSE => &[g!("not_strictly_false", &[P::Bool], P::Bool)],
        operators::EQUALS => &[g!("equals", &[A, A], P::Bool)],
        operators::NOT_EQUALS => &[g!("not_equals", &[A, A], P::Bool)],
        operators::ADD => &[
            g!("add_bytes", &[P::Bytes, P::Bytes], P::Bytes),
            g!("add_double", &[P::Double, P::Double], P::Double),
            g!(
                "add_duration_duration",
                &[P::Duration, P::Duration],
                P::Duration
            ),
            g!(
                "add_duration_timestamp",
                &[P::Duration, P::Timestamp],
                P::Timestamp
            ),
            g!(
                "add_timestamp_duration",
                &[P::Timestamp, P::Duration],
                P::Timestamp
            ),
            g!("add_int64", &[P::Int, P::Int], P::Int),
            g!("add_list", &[LA, LA], LA),
            g!("add_string", &[P::String, P::String], P::String),
            g!("add_uint64", &[P::Uint, P::Uint], P::Uint),
        ],
        operators::DIVIDE => &[
            g!("divide_double", &[P::Double, P::Double], P::Double),
            g!("divide_int64", &[P::Int, P::Int], P::Int),
            g!("divide_uint64", &[P::Uint, P::Uint], P::Uint),
        ],
        operators::MODULO => &[
            g!("modulo_int64", &[P::Int, P::Int], P::Int),
            g!("modulo_uint64", &[P::Uint, P::Uint], P::Uint),
        ],
        operators::MULTIPLY => &[
            g!("multiply_double", &[P::Double, P::Double], P::Double),
            g!("multiply_int64", &[P::Int, P::Int], P::Int),
            g!("multiply_uint64", &[P::Uint, P::Uint], P::Uint),
        ],
        operators::NEGATE => &[
            g!("negate_double", &[P::Double], P::Double),
            g!("negate_int64", &[P::Int], P::Int),
        ],
        operators::SUBSTRACT => &[
            g!("subtract_double", &[P::Double, P::Double], P::Double),
            g!(
                "subtract_duration_duration",
                &[P::Duration, P::Duration],
                P::Duration
            ),
            g!("subtract_int64", &[P::Int, P::Int], P::Int),
            g!(
                "subtract_timestamp_duration",
                &[P::Timestamp, P::Duration],
                P::Timestamp
            ),
            g!(
                "subtract_timestamp_timestamp",
                &[P::Timestamp, P::Timestamp],
                P::Duration
            ),
            g!("subtract_uint64", &[P::Uint, P::Uint], P::Uint),
        ],
        operators::LESS => relation!("less"),
        operators::LESS_EQUALS => relation!("less_equals"),
        operators::GREATER => relation!("greater"),
        operators::GREATER_EQUALS => relation!("greater_equals"),
        operators::INDEX => &[
            g!("index_list", &[LA, P::Int], A),
            g!("index_map", &[MAB, A], B),
        ],
        operators::OPT_INDEX => &[
            g!("list_optindex_optional_int", &[LA, P::Int], P::Opt(&A)),
            g!("map_optindex_optional_value", &[MAB, A], P::Opt(&B)),
        ],
        operators::OPT_SELECT => &[g!(
            "select_optional_field",
            &[P::Dyn, P::String],
            P::Opt(&P::Dyn)
        )],
        operators::IN => &[
            g!("in_list", &[A, LA], P::Bool),
            g!("in_map", &[A, MAB], P::Bool),
        ],
        "size" => &[
            g!("size_bytes", &[P::Bytes], P::Int),
            m!("bytes_size", &[P::Bytes], P::Int),
            g!("size_list", &[LA], P::Int),
            m!("list_size", &[LA], P::Int),
            g!("size_map", &[MAB], P::Int),
            m!("map_size", &[MAB], P::Int),
            g!("size_string", &[P::String], P::Int),
            m!("string_size", &[P::String], P::Int),
        ],
        "type" => &[g!("type", &[A], P::Type)],
        "bool" => &[
            g!("bool_to_bool", &[P::Bool], P::Bool),
            g!("string_to_bool", &[P::String], P::Bool),
        ],
        "bytes" => &[
            g!("bytes_to_bytes", &[P::Bytes], P::Bytes),
            g!("string_to_bytes", &[P::String], P::Bytes),
        ],
        "double" => &[
            g!("double_to_double", &[P::Double], P::Double),
            g!("int64_to_double", &[P::Int], P::Double),
            g!("string_to_double", &[P::String], P::Double),
            g!("uint64_to_double", &[P::Uint], P::Double),
        ],
        "duration" => &[
            g!("duration_to_duration", &[P::Duration], P::Duration),
            g!("int64_to_duration", &[P::Int], P::Duration),
            g!("string_to_duration", &[P::String], P::Duration),
        ],
        "dyn" => &[g!("to_dyn", &[A], P::Dyn)],
        "int" => &[
            g!("int64_to_int64", &[P::Int], P::Int),
            g!("double_to_int64", &[P::Double], P::Int),
            g!("duration_to_int64", &[P::Duration], P::Int),
            g!("string_to_int64", &[P::String], P::Int),
            g!("timestamp_to_int64", &[P::Timestamp], P::Int),
            g!("uint64_to_int64", &[P::Uint], P::Int),
        ],
        "string" => &[
            g!("string_to_string", &[P::String], P::String),
            g!("bool_to_string", &[P::Bool], P::String),
            g!("bytes_to_string", &[P::Bytes], P::String),
            g!("double_to_string", &[P::Double], P::String),
            g!("duration_to_string", &[P::Duration], P::String),
            g!("int64_to_string", &[P::Int], P::String),
            g!("timestamp_to_string", &[P::Timestamp], P::String),
            g!("uint64_to_string", &[P::Uint], P::String),
        ],
        "timestamp" => &[
            g!("timestamp_to_timestamp", &[P::Timestamp], P::Timestamp),
            g!("int64_to_timestamp", &[P::Int], P::Timestamp),
            g!("string_to_timestamp", &[P::String], P::Timestamp),
        ],
        "uint" => &[
            g!("uint64_to_uint64", &[P::Uint], P::Uint),
            g!("double_to_uint64", &[P::Double], P::Uint),
            g!("int64_to_uint64", &[P::Int], P::Uint),
            g!("string_to_uint64", &[P::String], P::Uint),
        ],
        "contains" => &[m!("contains_string", &[P::String, P::String], P::Bool)],
        "endsWith" => &[m!("ends_with_string", &[P::String, P::String], P::Bool)],
        "startsWith" => &[m!("starts_with_string", &[P::String, P::String], P::Bool)],
        "matches" => &[
            g!("matches", &[P::String, P::String], P::Bool),
            m!("matches_string", &[P::String, P::String], P::Bool),
        ],
        // cel-go ext strings (version 2).
        "charAt" => &[m!("string_char_at_int", &[P::String, P::Int], P::String)],
        "indexOf" => &[
            m!("string_index_of_string", &[P::String, P::String], P::Int),
            m!(
                "string_index_of_string_int",
                &[P::String, P::String, P::Int],
                P::Int
            ),
            m!("list_a_index_of_int", &[LA, A], P::Int),
        ],
        "lastIndexOf" => &[
            m!(
                "string_last_index_of_string",
                &[P::String, P::String],
                P::Int
            ),
            m!(
                "string_last_index_of_string_int",
                &[P::String, P::String, P::Int],
                P::Int
            ),
            m!("list_a_last_index_of_int", &[LA, A], P::Int),
        ],
        "lowerAscii" => &[m!("string_lower_ascii", &[P::String], P::String)],
        "upperAscii" => &[m!("string_upper_ascii", &[P::String], P::String)],
        "replace" => &[
            m!(
                "string_replace_string_string",
                &[P::String, P::String, P::String],
                P::String
            ),
            m!(
                "string_replace_string_string_int",
                &[P::String, P::String, P::String, P::Int],
                P::String
            ),
        ],
        "split" => &[
            m!("string_split_string", &[P::String, P::String], LS),
            m!(
                "string_split_string_int",
                &[P::String, P::String, P::Int],
                LS
            ),
        ],
        "substring" => &[
            m!("string_substring_int", &[P::String, P::Int], P::String),
            m!(
                "string_substring_int_int",
                &[P::String, P::Int, P::Int],
                P::String
            ),
        ],
        "trim" => &[m!("string_trim", &[P::String], P::String)],
        "join" => &[
            m!("list_join", &[LS], P::String),
            m!("list_join_string", &[LS, P::String], P::String),
        ],
        "format" => &[m!(
            "string_format",
            &[P::String, P::List(&P::Dyn)],
            P::String
        )],
        "strings.quote" => &[g!("strings_quote", &[P::String], P::String)],
        "reverse" => &[
            m!("string_reverse", &[P::String], P::String),
            m!("list_reverse", &[LA], LA),
        ],
        // k8s lists and regex.
        "isSorted" => &[m!("list_is_sorted", &[LA], P::Bool)],
        "sum" => SUM,
        "max" => MAX,
        "min" => MIN,
        "find" => &[m!("string_find_string", &[P::String, P::String], P::String)],
        "findAll" => &[
            m!("string_find_all_string", &[P::String, P::String], LS),
            m!(
                "string_find_all_string_int",
                &[P::String, P::String, P::Int],
                LS
            ),
        ],
        // cel-go ext lists (version 3) and sets.
        "lists.range" => &[g!("lists_range", &[P::Int], P::List(&P::Int))],
        "slice" => &[m!("list_slice", &[LA, P::Int, P::Int], LA)],
        "flatten" => &[
            m!("list_flatten", &[P::List(&LA)], LA),
            m!(
                "list_flatten_int",
                &[P::List(&P::Dyn), P::Int],
                P::List(&P::Dyn)
            ),
        ],
        "distinct" => &[m!("list_distinct", &[LA], LA)],
        "sort" => SORT,
        "@sortByAssociatedKeys" => SORT_BY,
        "first" => &[m!("list_first", &[LA], P::Opt(&A))],
        "last" => &[m!("list_last", &[LA], P::Opt(&A))],
        "sets.contains" => &[g!("list_sets_contains_list", &[LA, LA], P::Bool)],
        "sets.equivalent" => &[g!("list_sets_equivalent_list", &[LA, LA], P::Bool)],
        "sets.intersects" => &[g!("list_sets_intersects_list", &[LA, LA], P::Bool)],
        // k8s quantity and semver.
        "quantity" => &[g!("string_to_quantity", &[P::String], P::Quantity)],
        "isQuantity" => &[g!("is_quantity_string", &[P::String], P::Bool)],
        // Global in k8s (cel.Overload), unlike its siblings: `sign(q)`, not `q.sign()`.
        "sign" => &[g!("quantity_sign", &[P::Quantity], P::Int)],
        "asApproximateFloat" => &[m!("quantity_get_float", &[P::Quantity], P::Double)],
        "asInteger" => &[m!("quantity_get_int", &[P::Quantity], P::Int)],
        "isInteger" => &[m!("quantity_is_integer", &[P::Quantity], P::Bool)],
        "add" => &[
            m!("quantity_add", &[P::Quantity, P::Quantity], P::Quantity),
            m!("quantity_add_int", &[P::Quantity, P::Int], P::Quantity),
        ],
        "sub" => &[
            m!("quantity_sub", &[P::Quantity, P::Quantity], P::Quantity),
            m!("quantity_sub_int", &[P::Quantity, P::Int], P::Quantity),
        ],
        "semver" => &[
            g!("string_to_semver", &[P::String], P::Semver),
            g!("string_bool_to_semver", &[P::String, P::Bool], P::Semver),
        ],
        "isSemver" => &[
            g!("is_semver_string", &[P::String], P::Bool),
            g!("is_semver_string_bool", &[P::String, P::Bool], P::Bool),
        ],
        "major" => &[m!("semver_major", &[P::Semver], P::Int)],
        "minor" => &[m!("semver_minor", &[P::Semver], P::Int)],
        "patch" => &[m!("semver_patch", &[P::Semver], P::Int)],
        "isGreaterThan" => &[
            m!(
                "quantity_is_greater_than",
                &[P::Quantity, P::Quantity],
                P::Bool
            ),
            m!("semver_is_greater_than", &[P::Semver, P::Semver], P::Bool),
        ],
        "isLessThan" => &[
            m!(
                "quantity_is_less_than",
                &[P::Quantity, P::Quantity],
                P::Bool
            ),
            m!("semver_is_less_than", &[P::Semver, P::Semver], P::Bool),
        ],
        "compareTo" => &[
            m!("quantity_compare_to", &[P::Quantity, P::Quantity], P::Int),
            m!("semver_compare_to", &[P::Semver, P::Semver], P::Int),
        ],
        // optional values.
        "optional.of" => &[g!("optional_of", &[A], P::Opt(&A))],
        "optional.ofNonZeroValue" => &[g!("optional_ofNonZeroValue", &[A], P::Opt(&A))],
        "optional.none" => &[g!("optional_none", &[], P::Opt(&P::Dyn))],
        "hasValue" => &[m!("optional_hasValue", &[P::Opt(&A)], P::Bool)],
        "value" => &[m!("optional_value", &[P::Opt(&A)], A)],
        "or" => &[m!(
            "optional_or_optional",
            &[P::Opt(&A), P::Opt(&A)],
            P::Opt(&A)
        )],
        "orValue" => &[m!("optional_orValue_value", &[P::Opt(&A), A], A)],
        _ => &[],
    }
}

/// Type variables bound while matching one overload.
pub(super) type Binds = [Option<Ty>; 2];

pub(super) fn bind_slot(p: &P) -> usize {
    usize::from(matches!(p, P::B))
}

/// Whether `arg` may be passed for `p` (cel-go checker `isAssignable`, with dyn and `any`
/// matching anything), binding type variables.
pub(super) fn assignable(arg: &Ty, p: &P, binds: &mut Binds) -> bool {
    match p {
        P::A | P::B => {
            // cel-go `isValidTypeSubstitution`: an unbound variable takes the argument's type;
            // a bound one keeps the more general of the two (`mostGeneral`: dyn over the rest).
            let slot = &mut binds[bind_slot(p)];
            match slot {
                None | Some(Ty::Free) => {
                    *slot = Some(arg.clone());
                    true
                }
                Some(bound) if bound.is_dyn() => true,
                Some(_) if arg.is_dyn() => {
                    *slot = Some(arg.clone());
                    true
                }
                Some(bound) => compatible(arg, bound),
            }
        }
        _ if arg.is_dyn() => true,
        P::Dyn => true,
        P::List(q) => matches!(arg, Ty::List(t) if assignable(t, q, binds)),
        P::Map(k, v) => {
            matches!(arg, Ty::Map(kt, vt) if assignable(kt, k, binds) && assignable(vt, v, binds))
        }
        P::Opt(q) => matches!(arg, Ty::Optional(t) if assignable(t, q, binds)),
        P::Bool => *arg == Ty::Bool,
        P::Int => *arg == Ty::Int,
        P::Uint => *arg == Ty::Uint,
        P::Double => *arg == Ty::Double,
        P::String => *arg == Ty::String,
        P::Bytes => *arg == Ty::Bytes,
        P::Duration => *arg == Ty::Duration,
        P::Timestamp => *arg == Ty::Timestamp,
        P::Semver => *arg == Ty::Semver,
        P::Quantity => *arg == Ty::Quantity,
        P::Type => *arg == Ty::Type,
    }
}

/// Two types one type variable can stand for (element types may be dyn).
pub(super) fn compatible(a: &Ty, b: &Ty) -> bool {
    match (a, b) {
        _ if a.is_dyn() || b.is_dyn() => true,
        (Ty::List(x), Ty::List(y)) | (Ty::Optional(x), Ty::Optional(y)) => compatible(x, y),
        (Ty::Map(k1, v1), Ty::Map(k2, v2)) => compatible(k1, k2) && compatible(v1, v2),
        // A null is assignable to the nullable types (cel-go `isLegacyNullable`).
        (Ty::Null, t) | (t, Ty::Null) => matches!(
            t,
            Ty::Null | Ty::Semver | Ty::Quantity | Ty::Device | Ty::Duration | Ty::Timestamp
        ),
        _ => a == b,
    }
}

pub(super) fn substitute(p: &P, binds: &Binds) -> Ty {
    match p {
        P::A | P::B => binds[bind_slot(p)].clone().unwrap_or(Ty::Dyn),
        P::List(q) => Ty::List(Box::new(substitute(q, binds))),
        P::Map(k, v) => Ty::Map(
            Box::new(substitute(k, binds)),
            Box::new(substitute(v, binds)),
        ),
        P::Opt(q) => Ty::Optional(Box::new(substitute(q, binds))),
        P::Bool => Ty::Bool,
        P::Int => Ty::Int,
        P::Uint => Ty::Uint,
        P::Double => Ty::Double,
        P::String => Ty::String,
        P::Bytes => Ty::Bytes,
        P::Duration => Ty::Duration,
        P::Timestamp => Ty::Timestamp,
        P::Semver => Ty::Semver,
        P::Quantity => Ty::Quantity,
        P::Type => Ty::Type,
        P::Dyn => Ty::Dyn,
    }
}
