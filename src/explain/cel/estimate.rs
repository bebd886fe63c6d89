//! The API server's static cost estimate of a device selector (cel-go checker/cost.go with
//! k8s.io/apiserver pkg/cel/library/cost.go `EstimateCallCost`), against
//! [`super::bounds::MAX_COST`].

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, operators};

use super::bounds::{CONTAINS, MATCHES, namespaced, traversal};

/// Bounds on what a value can be, for the estimate: its size (characters of a string,
/// entries of a list or map), its elements' size, and where it sits in `device`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bound {
    cost: u64,
    size: u64,
    elem: u64,
    shape: Shape,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    Device,
    Domains,
    Names,
    String,
    List,
    Other,
}

impl Bound {
    fn scalar(cost: u64) -> Bound {
        Bound {
            cost,
            size: 1,
            elem: 1,
            shape: Shape::Other,
        }
    }
    fn string(cost: u64, size: u64) -> Bound {
        Bound {
            cost,
            size,
            elem: 1,
            shape: Shape::String,
        }
    }
}

// resourceapi limits the DRA environment declares its types with (dra cel/compile.go).
const DRIVER_NAME_MAX: u64 = 63;
const DOMAIN_MAX: u64 = 63;
const ID_MAX: u64 = 32;
const ATTRIBUTE_VALUE_MAX: u64 = 64;
const ATTRIBUTES_PER_DEVICE_MAX: u64 = 32;

/// The worst-case cost the API server estimates for `expr` (`env.EstimateCost`).
pub(crate) fn estimate(expr: &IdedExpr) -> u64 {
    estimate_in(expr, &mut Vec::new()).cost
}

fn estimate_in(expr: &IdedExpr, scope: &mut Vec<(String, Bound)>) -> Bound {
    match &expr.expr {
        Expr::Literal(literal) => match literal {
            LiteralValue::String(s) => Bound::string(0, s.inner().chars().count() as u64),
            LiteralValue::Bytes(b) => Bound::string(0, b.inner().len() as u64),
            _ => Bound::scalar(0),
        },
        Expr::Ident(name) => {
            if let Some((_, bound)) = scope.iter().rev().find(|(n, _)| n == name) {
                return Bound { cost: 1, ..*bound };
            }
            Bound {
                shape: if name == "device" {
                    Shape::Device
                } else {
                    Shape::Other
                },
                ..Bound::scalar(1)
            }
        }
        Expr::Select(select) => {
            let operand = estimate_in(&select.operand, scope);
            // Presence tests are free (Kubernetes sets PresenceTestHasCost(false)).
            let cost = operand.cost.saturating_add(u64::from(!select.test));
            if select.test {
                return Bound::scalar(cost);
            }
            Bound {
                cost,
                ..member(operand.shape, Some(&select.field))
            }
        }
        Expr::List(list) => {
            let mut out = Bound {
                cost: 10,
                size: list.elements.len() as u64,
                elem: 1,
                shape: Shape::List,
            };
            for e in &list.elements {
                let b = estimate_in(e, scope);
                out.cost = out.cost.saturating_add(b.cost);
                out.elem = out.elem.max(b.size);
            }
            out
        }
        Expr::Map(map) => {
            let mut out = Bound {
                cost: 30,
                size: map.entries.len() as u64,
                elem: 1,
                shape: Shape::Other,
            };
            for entry in &map.entries {
                if let EntryExpr::MapEntry(m) = &entry.expr {
                    let entry_cost = estimate_in(&m.key, scope)
                        .cost
                        .saturating_add(estimate_in(&m.value, scope).cost);
                    out.cost = out.cost.saturating_add(entry_cost);
                }
            }
            out
        }
        Expr::Struct(_) => Bound::scalar(40),
        Expr::Comprehension(c) => {
            let range = estimate_in(&c.iter_range, scope);
            let init = estimate_in(&c.accu_init, scope);
            let iterations = match range.shape {
                Shape::Domains | Shape::Names => ATTRIBUTES_PER_DEVICE_MAX,
                _ => range.size,
            };
            let element = match range.shape {
                Shape::Domains => Bound::string(1, DOMAIN_MAX),
                Shape::Names => Bound::string(1, ID_MAX),
                _ => Bound {
                    cost: 1,
                    size: range.elem,
                    elem: 1,
                    shape: Shape::Other,
                },
            };
            scope.push((c.accu_var.clone(), init));
            scope.push((c.iter_var.clone(), element));
            let per_iteration = estimate_in(&c.loop_cond, scope)
                .cost
                .saturating_add(estimate_in(&c.loop_step, scope).cost);
            scope.pop();
            let result = estimate_in(&c.result, scope);
            scope.pop();
            Bound {
                cost: range
                    .cost
                    .saturating_add(init.cost)
                    .saturating_add(iterations.saturating_mul(per_iteration))
                    .saturating_add(result.cost),
                ..result
            }
        }
        Expr::Call(call) => estimate_call(call, scope),
        Expr::Unspecified => Bound::scalar(0),
    }
}

/// `operand.field` or `operand[key]` on the DRA device's declared types.
fn member(operand: Shape, field: Option<&str>) -> Bound {
    match (operand, field) {
        (Shape::Device, Some("driver")) => Bound::string(0, DRIVER_NAME_MAX),
        (Shape::Device, Some("attributes" | "capacity")) => Bound {
            cost: 0,
            size: ATTRIBUTES_PER_DEVICE_MAX,
            elem: DOMAIN_MAX,
            shape: Shape::Domains,
        },
        (Shape::Domains, _) => Bound {
            cost: 0,
            size: ATTRIBUTES_PER_DEVICE_MAX,
            elem: ID_MAX,
            shape: Shape::Names,
        },
        (Shape::Names, _) => Bound::string(0, ATTRIBUTE_VALUE_MAX),
        _ => Bound::scalar(0),
    }
}

fn estimate_call(call: &CallExpr, scope: &mut Vec<(String, Bound)>) -> Bound {
    let qualified = namespaced(call);
    let target = match &qualified {
        Some(_) => None,
        None => call.target.as_ref().map(|t| estimate_in(t, scope)),
    };
    let args: Vec<Bound> = call.args.iter().map(|a| estimate_in(a, scope)).collect();
    let inputs = target
        .iter()
        .chain(&args)
        .fold(0u64, |sum, b| sum.saturating_add(b.cost));
    // `x.f(a)` and `f(x, a)` alike: the receiver is the first argument.
    let all: Vec<Bound> = target.into_iter().chain(args.iter().copied()).collect();
    let size = |i: usize| all.get(i).map_or(1, |b| b.size);
    let name = qualified.as_deref().unwrap_or(&call.func_name);
    let (own, result) = match name {
        operators::LOGICAL_AND | operators::LOGICAL_OR => (0, Bound::scalar(0)),
        operators::CONDITIONAL => {
            // The condition and the costlier branch.
            let branches = args
                .get(1)
                .map_or(0, |b| b.cost)
                .max(args.get(2).map_or(0, |b| b.cost));
            let cost = args.first().map_or(0, |b| b.cost).saturating_add(branches);
            let mut result = args.get(1).copied().unwrap_or(Bound::scalar(0));
            if let Some(other) = args.get(2) {
                result.size = result.size.max(other.size);
            }
            return Bound { cost, ..result };
        }
        operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT => {
            let operand = all.first().map_or(Shape::Other, |b| b.shape);
            let result = match operand {
                Shape::List => Bound {
                    size: all[0].elem,
                    ..Bound::scalar(0)
                },
                shape => member(shape, None),
            };
            (1, result)
        }
        operators::ADD => {
            let shape = all.first().map_or(Shape::Other, |b| b.shape);
            let total = size(0).saturating_add(size(1));
            match shape {
                Shape::String => (traversal(total, 100), Bound::string(0, total)),
                Shape::List => (
                    1,
                    Bound {
                        size: total,
                        elem: all.iter().map(|b| b.elem).max().unwrap_or(1),
                        shape: Shape::List,
                        cost: 0,
                    },
                ),
                _ => (1, Bound::scalar(0)),
            }
        }
        operators::EQUALS
        | operators::NOT_EQUALS
        | super::env::EQUALS
        | super::env::NOT_EQUALS
        | operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS => (traversal(size(0).min(size(1)), 100), Bound::scalar(0)),
        operators::IN => (size(1), Bound::scalar(0)),
        "matches" | MATCHES | "find" | "findAll" => (
            traversal(size(0).saturating_add(1), 100).saturating_mul(traversal(size(1), 250)),
            Bound::scalar(0),
        ),
        "contains" | CONTAINS => (
            traversal(size(0), 100).saturating_mul(traversal(size(1), 100)),
            Bound::scalar(0),
        ),
        "startsWith" | "endsWith" | "quantity" | "isQuantity" | "semver" | "isSemver" => {
            (traversal(size(0), 100), Bound::scalar(0))
        }
        "lowerAscii" | "upperAscii" | "substring" | "trim" => {
            (traversal(size(0), 100), Bound::string(0, size(0)))
        }
        "replace" => (traversal(size(0), 200), Bound::string(0, size(0))),
        "split" => (
            traversal(size(0), 200),
            Bound {
                cost: 0,
                size: size(0).saturating_add(1),
                elem: size(0),
                shape: Shape::List,
            },
        ),
        "join" => {
            let joined =
                size(0).saturating_mul(all.first().map_or(1, |b| b.elem).saturating_add(size(1)));
            (traversal(joined, 200), Bound::string(0, joined))
        }
        "sets.contains" | "sets.intersects" => (
            size(0).saturating_mul(size(1)).saturating_add(1),
            Bound::scalar(0),
        ),
        "sets.equivalent" => (
            size(0)
                .saturating_mul(size(1))
                .saturating_mul(2)
                .saturating_add(1),
            Bound::scalar(0),
        ),
        "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" => (
            traversal(
                size(0).saturating_mul(all.first().map_or(1, |b| b.elem)),
                100,
            ),
            Bound::scalar(0),
        ),
        "size" => (1, Bound::scalar(0)),
        "lists.range" => {
            let n = match call.args.first().map(|a| &a.expr) {
                Some(Expr::Literal(LiteralValue::Int(n))) => u64::try_from(*n.inner()).unwrap_or(0),
                _ => 1,
            };
            (
                1,
                Bound {
                    cost: 0,
                    size: n,
                    elem: 1,
                    shape: Shape::List,
                },
            )
        }
        "sort" | "reverse" | "distinct" | "slice" => (
            1,
            Bound {
                cost: 0,
                ..all.first().copied().unwrap_or(Bound::scalar(0))
            },
        ),
        _ => (1, Bound::scalar(0)),
    };
    Bound {
        cost: inputs.saturating_add(own),
        ..result
    }
}
