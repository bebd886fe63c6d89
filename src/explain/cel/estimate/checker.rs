//! The checker: each node's type and each call's overloads, as cel-go's would infer them, and
//! the sizes DRA declares (dra cel/compile.go `sizeEstimator.EstimateSize`).

use super::*;

#[derive(Default)]
pub(super) struct Checker {
    pub(super) types: HashMap<u64, Ty>,
    pub(super) overloads: HashMap<u64, Vec<&'static str>>,
}

impl Checker {
    pub(super) fn ty(&self, e: &IdedExpr) -> Ty {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Error)
    }

    /// Types `e` and what it holds; `scope` holds the comprehension variables in reach.
    pub(super) fn check(&mut self, e: &IdedExpr, scope: &mut Vec<(String, Ty)>) -> Ty {
        let ty = match &e.expr {
            Expr::Literal(literal) => match literal {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::Uint,
            },
            Expr::Ident(name) => match scope.iter().rev().find(|(n, _)| n == name) {
                Some((_, t)) => t.clone(),
                None if name == "device" => Ty::Device,
                None => Ty::Error,
            },
            Expr::Select(select) => {
                let operand = self.check(&select.operand, scope);
                if select.test {
                    Ty::Bool
                } else {
                    field_type(&operand, &select.field)
                }
            }
            Expr::List(list) => {
                let mut elem = Ty::Free;
                for element in &list.elements {
                    let t = self.check(element, scope);
                    elem = join(elem, t);
                }
                Ty::List(Box::new(elem))
            }
            Expr::Map(map) => {
                let (mut key, mut value) = (Ty::Free, Ty::Free);
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        key = join(key, self.check(&entry.key, scope));
                        value = join(value, self.check(&entry.value, scope));
                    }
                }
                Ty::Map(Box::new(key), Box::new(value))
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    if let EntryExpr::StructField(field) = &entry.expr {
                        self.check(&field.value, scope);
                    }
                }
                Ty::Error
            }
            Expr::Comprehension(c) => self.check_comprehension(c, scope),
            Expr::Call(call) => self.check_call(e.id, call, scope),
            Expr::Unspecified => Ty::Error,
        };
        self.types.insert(e.id, ty.clone());
        ty
    }

    pub(super) fn check_comprehension(
        &mut self,
        c: &ComprehensionExpr,
        scope: &mut Vec<(String, Ty)>,
    ) -> Ty {
        let range = self.check(&c.iter_range, scope);
        let init = self.check(&c.accu_init, scope);
        let (var, var2) = match &range {
            Ty::List(t) if c.iter_var2.is_some() => (Ty::Int, (**t).clone()),
            Ty::List(t) => ((**t).clone(), Ty::Dyn),
            Ty::Map(k, v) => ((**k).clone(), (**v).clone()),
            Ty::Dyn | Ty::Error | Ty::Free => (Ty::Dyn, Ty::Dyn),
            _ => (Ty::Error, Ty::Error),
        };
        scope.push((c.accu_var.clone(), init.clone()));
        scope.push((c.iter_var.clone(), var));
        if let Some(name) = &c.iter_var2 {
            scope.push((name.clone(), var2));
        }
        self.check(&c.loop_cond, scope);
        let step = self.check(&c.loop_step, scope);
        scope.truncate(scope.len() - 1 - usize::from(c.iter_var2.is_some()));
        // The accumulator's type is bound by the step (`[]` becomes the list the step builds).
        let accu = join(init, step);
        scope.last_mut().expect("the accumulator").1 = accu;
        let result = self.check(&c.result, scope);
        scope.pop();
        result
    }

    pub(super) fn check_call(
        &mut self,
        id: u64,
        call: &CallExpr,
        scope: &mut Vec<(String, Ty)>,
    ) -> Ty {
        let qualified = namespaced(call);
        let mut arg_types = Vec::with_capacity(call.args.len() + 1);
        if qualified.is_none()
            && let Some(target) = &call.target
        {
            arg_types.push(self.check(target, scope));
        }
        for arg in &call.args {
            arg_types.push(self.check(arg, scope));
        }
        let member = qualified.is_none() && call.target.is_some();
        let name = qualified.as_deref().unwrap_or(&call.func_name);
        let declared = overloads(name);
        if declared.is_empty() {
            // A function this port does not declare: one overload of its name.
            self.overloads.insert(id, vec!["undeclared"]);
            return Ty::Dyn;
        }
        let mut ids = Vec::new();
        let mut result: Option<Ty> = None;
        for overload in declared {
            if overload.member != member || overload.params.len() != arg_types.len() {
                continue;
            }
            let mut binds: Binds = [None, None];
            if !arg_types
                .iter()
                .zip(overload.params)
                .all(|(arg, p)| assignable(arg, p, &mut binds))
            {
                continue;
            }
            ids.push(overload.id);
            let t = substitute(&overload.result, &binds);
            result = Some(match result {
                None => t,
                Some(r) if r.is_dyn() || r == t => r,
                Some(_) => Ty::Dyn,
            });
            // cel-go resolves `&&` and `||` to their first overload only, and the first overload
            // an unbound type variable matches binds it (the checker keeps the mapping), so the
            // later ones no longer match.
            if matches!(name, operators::LOGICAL_AND | operators::LOGICAL_OR)
                || arg_types.iter().any(has_free)
            {
                break;
            }
        }
        self.overloads.insert(id, ids);
        result.unwrap_or(Ty::Error)
    }
}

/// Whether `t` holds an unbound type variable (the element of `[]`).
pub(super) fn has_free(t: &Ty) -> bool {
    match t {
        Ty::Free => true,
        Ty::List(t) | Ty::Optional(t) => has_free(t),
        Ty::Map(k, v) => has_free(k) || has_free(v),
        _ => false,
    }
}

/// The more specific of two types one value may have (a list's elements, a map's entries,
/// an accumulator before and after its step).
pub(super) fn join(a: Ty, b: Ty) -> Ty {
    match (a, b) {
        (Ty::Free, t) | (t, Ty::Free) => t,
        (Ty::List(x), Ty::List(y)) => Ty::List(Box::new(join(*x, *y))),
        (Ty::Map(k1, v1), Ty::Map(k2, v2)) => {
            Ty::Map(Box::new(join(*k1, *k2)), Box::new(join(*v1, *v2)))
        }
        (a, b) if a == b => a,
        _ => Ty::Dyn,
    }
}

/// The type of `operand.field` in the DRA environment.
pub(super) fn field_type(operand: &Ty, field: &str) -> Ty {
    match (operand, field) {
        (Ty::Device, "driver") => Ty::String,
        (Ty::Device, "attributes") => Ty::Map(
            Box::new(Ty::String),
            Box::new(Ty::Map(Box::new(Ty::String), Box::new(Ty::Any))),
        ),
        (Ty::Device, "capacity") => Ty::Map(
            Box::new(Ty::String),
            Box::new(Ty::Map(Box::new(Ty::String), Box::new(Ty::Quantity))),
        ),
        (Ty::Device, "allowMultipleAllocations") => Ty::Bool,
        (Ty::Map(_, v), _) => (**v).clone(),
        (t, _) if t.is_dyn() => Ty::Dyn,
        _ => Ty::Error,
    }
}

// The DRA size estimator (dra cel/compile.go `sizeEstimator.EstimateSize`)

/// The declared types `device` holds, by the path cel-go builds to a node.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Decl {
    Device,
    Driver,
    AttributeDomains,
    Attributes,
    Attribute,
    CapacityDomains,
    Capacities,
    Quantity,
    MultiAlloc,
    Domain,
    Id,
}

impl Decl {
    /// `DeclType.MaxElements`, from resourceapi's limits (0 where compile.go sets none).
    pub(super) fn max_elements(self) -> u64 {
        match self {
            Decl::Device | Decl::Quantity => 0,
            Decl::Driver | Decl::Domain => 63,
            Decl::Id => 32,
            Decl::Attribute => 64,
            Decl::AttributeDomains
            | Decl::Attributes
            | Decl::CapacityDomains
            | Decl::Capacities => 32,
            Decl::MultiAlloc => 1,
        }
    }
    pub(super) fn elem(self) -> Option<Decl> {
        match self {
            Decl::AttributeDomains => Some(Decl::Attributes),
            Decl::Attributes => Some(Decl::Attribute),
            Decl::CapacityDomains => Some(Decl::Capacities),
            Decl::Capacities => Some(Decl::Quantity),
            _ => None,
        }
    }
    pub(super) fn key(self) -> Option<Decl> {
        match self {
            Decl::AttributeDomains | Decl::CapacityDomains => Some(Decl::Domain),
            Decl::Attributes | Decl::Capacities => Some(Decl::Id),
            _ => None,
        }
    }
    pub(super) fn field(self, name: &str) -> Option<Decl> {
        match (self, name) {
            (Decl::Device, "driver") => Some(Decl::Driver),
            (Decl::Device, "attributes") => Some(Decl::AttributeDomains),
            (Decl::Device, "capacity") => Some(Decl::CapacityDomains),
            (Decl::Device, "allowMultipleAllocations") => Some(Decl::MultiAlloc),
            // Every entry of an attribute map has the attribute's maximum size.
            (Decl::Attributes, _) => Some(Decl::Attribute),
            _ => None,
        }
    }
}

pub(super) fn dra_size(path: &[String]) -> Option<Range> {
    let (root, rest) = path.split_first()?;
    if root != "device" {
        return None;
    }
    let mut node = Decl::Device;
    for name in rest {
        node = match name.as_str() {
            "@items" | "@values" => node.elem()?,
            "@keys" => node.key()?,
            field => node.field(field)?,
        };
    }
    Some(Range {
        min: 0,
        max: node.max_elements(),
    })
}
