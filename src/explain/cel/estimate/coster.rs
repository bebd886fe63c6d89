//! The coster: cel-go checker/cost.go `coster`, with k8s's `EstimateCallCost` and the
//! lists and sets extensions' costs.

use super::*;

/// cel-go `entrySizeEstimate`: a list's or map's entries.
#[derive(Clone, Copy, Debug)]
pub(super) struct EntrySize {
    list: bool,
    key: Range,
    val: Range,
}

pub(super) fn union_entries(a: Option<EntrySize>, b: Option<EntrySize>) -> Option<EntrySize> {
    let (a, b) = (a?, b?);
    Some(EntrySize {
        list: a.list,
        key: a.key.union(b.key),
        val: a.val.union(b.val),
    })
}

pub(super) struct Local {
    path: Option<Vec<String>>,
    size: Option<Range>,
    entry: Option<EntrySize>,
}

/// cel-go `AstNode`: what an estimator sees of an argument.
pub(super) struct Node<'e> {
    path: Option<Vec<String>>,
    ty: Ty,
    expr: Option<&'e IdedExpr>,
    size: Option<Range>,
}

/// cel-go `CallEstimate`: a call's cost and the size of its result.
pub(super) struct Call {
    cost: Range,
    size: Option<Range>,
}

impl Call {
    pub(super) fn new(cost: Range, size: Option<Range>) -> Self {
        Call { cost, size }
    }
}

pub(super) struct Coster {
    pub(super) checked: Checker,
    pub(super) minor: u32,
    pub(super) paths: HashMap<u64, Vec<String>>,
    pub(super) sizes: HashMap<u64, Range>,
    pub(super) entry_sizes: HashMap<u64, EntrySize>,
    pub(super) locals: HashMap<String, Vec<Local>>,
}

impl Coster {
    pub(super) fn cost(&mut self, e: &IdedExpr) -> Range {
        match &e.expr {
            Expr::Literal(_) => Range::fixed(0),
            Expr::Ident(name) => {
                let path = match self.local(name) {
                    Some(v) => v.path.clone().unwrap_or_default(),
                    None => vec![name.clone()],
                };
                self.paths.insert(e.id, path);
                Range::fixed(SELECT_AND_IDENT)
            }
            Expr::Select(select) => {
                // Kubernetes sets PresenceTestHasCost(false): `has()` costs its operand.
                if select.test {
                    return self.cost(&select.operand);
                }
                let mut sum = self.cost(&select.operand);
                if matches!(
                    self.checked.ty(&select.operand).kind(),
                    Kind::Map | Kind::Struct | Kind::TypeParam
                ) {
                    sum = sum.add(Range::fixed(SELECT_AND_IDENT));
                }
                let mut path = self.path(&select.operand).unwrap_or_default();
                path.push(select.field.clone());
                self.paths.insert(e.id, path);
                sum
            }
            Expr::Call(call) => self.cost_call(e, call),
            Expr::List(list) => {
                let mut sum = Range::fixed(0);
                let mut items = Range {
                    min: if list.elements.is_empty() {
                        0
                    } else {
                        u64::MAX
                    },
                    max: 0,
                };
                for element in &list.elements {
                    sum = sum.add(self.cost(element));
                    items = items.union(self.size_or_unknown(element));
                }
                self.entry_sizes.insert(
                    e.id,
                    EntrySize {
                        list: true,
                        key: Range::fixed(1),
                        val: items,
                    },
                );
                sum.add(Range::fixed(LIST_CREATE))
            }
            Expr::Map(map) => {
                let mut sum = Range::fixed(0);
                let empty = if map.entries.is_empty() { 0 } else { u64::MAX };
                let mut keys = Range { min: empty, max: 0 };
                let mut vals = keys;
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        sum = sum.add(self.cost(&entry.key));
                        sum = sum.add(self.cost(&entry.value));
                        keys = keys.union(self.size_or_unknown(&entry.key));
                        vals = vals.union(self.size_or_unknown(&entry.value));
                    }
                }
                self.entry_sizes.insert(
                    e.id,
                    EntrySize {
                        list: false,
                        key: keys,
                        val: vals,
                    },
                );
                sum.add(Range::fixed(MAP_CREATE))
            }
            Expr::Struct(s) => {
                let mut sum = Range::fixed(0);
                for entry in &s.entries {
                    if let EntryExpr::StructField(field) = &entry.expr {
                        sum = sum.add(self.cost(&field.value));
                    }
                }
                sum.add(Range::fixed(STRUCT_CREATE))
            }
            Expr::Comprehension(c) if is_bind(c) => self.cost_bind(e, c),
            Expr::Comprehension(c) => self.cost_comprehension(e, c),
            Expr::Unspecified => Range::fixed(0),
        }
    }

    pub(super) fn local(&self, name: &str) -> Option<&Local> {
        self.locals.get(name).and_then(|v| v.last())
    }

    pub(super) fn push_local(&mut self, name: &str, local: Local) {
        self.locals.entry(name.to_owned()).or_default().push(local);
    }

    pub(super) fn pop_local(&mut self, name: &str) {
        if let Some(stack) = self.locals.get_mut(name) {
            stack.pop();
        }
    }

    /// cel-go `getPath`: `None` where Go's slice is nil.
    pub(super) fn path(&self, e: &IdedExpr) -> Option<Vec<String>> {
        if let Expr::Ident(name) = &e.expr
            && let Some(v) = self.local(name)
        {
            return v.path.clone();
        }
        self.paths.get(&e.id).cloned()
    }

    pub(super) fn node<'e>(&mut self, e: &'e IdedExpr) -> Node<'e> {
        let path = self.path(e).filter(|p| {
            !p.first()
                .is_some_and(|f| f == ACCUMULATOR || f == HIDDEN_ACCUMULATOR)
        });
        Node {
            path,
            ty: self.checked.ty(e),
            expr: Some(e),
            size: self.compute_size(e),
        }
    }

    pub(super) fn compute_size(&mut self, e: &IdedExpr) -> Option<Range> {
        if let Some(size) = self.sizes.get(&e.id) {
            return Some(*size);
        }
        if let Some(size) = expr_size(e) {
            return Some(size);
        }
        if let Some(size) = self.path(e).and_then(|p| dra_size(&p)) {
            self.sizes.insert(e.id, size);
            return Some(size);
        }
        if self.checked.ty(e).is_scalar() {
            return Some(Range::fixed(1));
        }
        if let Expr::Ident(name) = &e.expr
            && let Some(size) = self.local(name).and_then(|v| v.size)
        {
            return Some(size);
        }
        None
    }

    pub(super) fn size_or_unknown(&mut self, e: &IdedExpr) -> Range {
        self.compute_size(e).unwrap_or(UNKNOWN)
    }

    pub(super) fn entry_size(&self, e: &IdedExpr) -> Option<EntrySize> {
        if let Some(size) = self.entry_sizes.get(&e.id) {
            return Some(*size);
        }
        if let Expr::Ident(name) = &e.expr {
            return self.local(name).and_then(|v| v.entry);
        }
        None
    }

    pub(super) fn set_size(&mut self, e: &IdedExpr, size: Option<Range>) {
        if let Some(size) = size {
            self.sizes.insert(e.id, size);
        }
    }

    pub(super) fn set_entry_size(&mut self, e: &IdedExpr, size: Option<EntrySize>) {
        if let Some(size) = size {
            self.entry_sizes.insert(e.id, size);
        }
    }

    pub(super) fn push_accumulator(&mut self, name: &str, init: &IdedExpr) {
        let local = Local {
            path: self.path(init),
            size: self.compute_size(init),
            entry: self.entry_size(init),
        };
        self.push_local(name, local);
    }

    /// cel-go `pushIterSingle`, `pushIterKey` and `pushIterValue`.
    pub(super) fn push_iteration(&mut self, name: &str, range: &IdedExpr, which: Iteration) {
        let entry = self.entry_size(range);
        let list = match entry {
            Some(entry) => entry.list,
            None => matches!(self.checked.ty(range).kind(), Kind::List),
        };
        let (size, sub) = match (which, list) {
            (Iteration::Single, true) => (entry.map(|e| e.val), "@items"),
            (Iteration::Single, false) => (entry.map(|e| e.key), "@keys"),
            (Iteration::Key, true) => (entry.map(|e| e.key), "@indices"),
            (Iteration::Key, false) => (entry.map(|e| e.key), "@keys"),
            (Iteration::Value, true) => (entry.map(|e| e.val), "@items"),
            (Iteration::Value, false) => (entry.map(|e| e.val), "@values"),
        };
        let mut path = self.path(range).unwrap_or_default();
        path.push(sub.to_owned());
        self.push_local(
            name,
            Local {
                path: Some(path),
                size,
                entry: None,
            },
        );
    }

    pub(super) fn cost_comprehension(&mut self, e: &IdedExpr, c: &ComprehensionExpr) -> Range {
        let mut sum = self.cost(&c.iter_range);
        sum = sum.add(self.cost(&c.accu_init));
        self.push_accumulator(&c.accu_var, &c.accu_init);
        match &c.iter_var2 {
            Some(var2) => {
                self.push_iteration(&c.iter_var, &c.iter_range, Iteration::Key);
                self.push_iteration(var2, &c.iter_range, Iteration::Value);
            }
            None => self.push_iteration(&c.iter_var, &c.iter_range, Iteration::Single),
        }
        let condition = self.cost(&c.loop_cond);
        let step = self.cost(&c.loop_step);
        self.pop_local(&c.iter_var);
        if let Some(var2) = &c.iter_var2 {
            self.pop_local(var2);
        }
        sum = sum.add(self.cost(&c.result));
        self.pop_local(&c.accu_var);
        let count = self.size_or_unknown(&c.iter_range);
        sum = sum.add(count.multiply(step.add(condition)));
        match &c.accu_init.expr {
            Expr::Literal(_) => {
                let size = self.compute_size(&c.accu_init);
                self.set_size(e, size);
            }
            Expr::List(_) | Expr::Map(_) => {
                self.set_size(e, Some(count));
                let step_entries = self.entry_size(&c.loop_step);
                self.set_entry_size(e, step_entries);
            }
            _ => {}
        }
        sum
    }

    pub(super) fn cost_bind(&mut self, e: &IdedExpr, c: &ComprehensionExpr) -> Range {
        let mut sum = self.cost(&c.iter_range);
        sum = sum.add(self.cost(&c.accu_init));
        self.push_accumulator(&c.accu_var, &c.accu_init);
        sum = sum.add(self.cost(&c.result));
        self.pop_local(&c.accu_var);
        let (size, entry) = (self.compute_size(&c.result), self.entry_size(&c.result));
        self.set_size(e, size);
        self.set_entry_size(e, entry);
        sum
    }

    pub(super) fn cost_call(&mut self, e: &IdedExpr, call: &CallExpr) -> Range {
        let qualified = namespaced(call);
        let name = qualified.as_deref().unwrap_or(&call.func_name).to_owned();
        if name == "dyn" && call.target.is_none() && call.args.len() == 1 {
            // cel-go `maybeUnwrapDynCall`: 1 and the argument's sizes.
            let cost = self.cost(&call.args[0]);
            let (size, entry) = (
                self.compute_size(&call.args[0]),
                self.entry_size(&call.args[0]),
            );
            self.set_size(e, size);
            self.set_entry_size(e, entry);
            return Range::fixed(1).add(cost);
        }
        let mut arg_costs = Vec::with_capacity(call.args.len());
        let mut args = Vec::with_capacity(call.args.len());
        for arg in &call.args {
            arg_costs.push(self.cost(arg));
            args.push(self.node(arg));
        }
        let ids = self
            .checked
            .overloads
            .get(&e.id)
            .cloned()
            .unwrap_or_default();
        if ids.is_empty() {
            return Range::fixed(0);
        }
        let mut sum = Range::fixed(0);
        let target = match (&qualified, &call.target) {
            (None, Some(t)) => {
                sum = sum.add(self.cost(t));
                Some(self.node(t))
            }
            _ => None,
        };
        let mut function_cost = Range {
            min: u64::MAX,
            max: 0,
        };
        let mut result: Option<Range> = None;
        for id in ids {
            let estimate = self.function_cost(e, &name, id, target.as_ref(), &args, &arg_costs);
            function_cost = function_cost.union(estimate.cost);
            if let Some(size) = estimate.size {
                result = Some(result.map_or(size, |r| r.union(size)));
            }
            if (id == "index_list" || id == "index_map")
                && let Some(first) = call.args.first()
            {
                result = self.entry_size(first).map(|s| s.val);
                let mut path = self.path(first).unwrap_or_default();
                path.push(
                    if id == "index_list" {
                        "@items"
                    } else {
                        "@values"
                    }
                    .to_owned(),
                );
                self.paths.insert(e.id, path);
            }
            if result.is_none() {
                result = self.compute_size(e);
            }
        }
        self.set_size(e, result);
        sum.add(function_cost)
    }

    /// cel-go `functionCost`: the overload estimators, then Kubernetes' by function name, then
    /// cel-go's own.
    pub(super) fn function_cost<'e>(
        &mut self,
        e: &IdedExpr,
        function: &str,
        id: &str,
        target: Option<&Node<'e>>,
        args: &[Node<'e>],
        arg_costs: &[Range],
    ) -> Call {
        let arg_sum = arg_costs.iter().fold(Range::fixed(0), |sum, c| sum.add(*c));
        if let Some(call) = self.overload_estimate(id, target, args) {
            return Call::new(call.cost.add(arg_sum), call.size);
        }
        if let Some(call) = self.kubernetes_estimate(function, target, args) {
            return Call::new(call.cost.add(arg_sum), call.size);
        }
        let size = |n: &Node<'_>| n.size.unwrap_or(UNKNOWN);
        match id {
            "string_format" if target.is_some() => {
                return Call::new(
                    size(target.unwrap()).factor(STRING_TRAVERSAL).add(arg_sum),
                    None,
                );
            }
            "string_to_bytes" if args.len() == 1 => {
                let sz = size(&args[0]);
                return Call::new(
                    sz.factor(STRING_TRAVERSAL).add(arg_sum),
                    Some(Range {
                        min: sz.min,
                        max: sz.max.wrapping_mul(4),
                    }),
                );
            }
            "bytes_to_string" if args.len() == 1 => {
                let sz = size(&args[0]);
                return Call::new(
                    sz.factor(STRING_TRAVERSAL).add(arg_sum),
                    Some(Range {
                        min: sz.min / 4,
                        max: sz.max,
                    }),
                );
            }
            "strings_quote" if args.len() == 1 => {
                let sz = size(&args[0]);
                return Call::new(
                    sz.factor(STRING_TRAVERSAL).add(arg_sum),
                    Some(Range {
                        min: sz.min.wrapping_add(2),
                        max: sz.max.wrapping_mul(2).wrapping_add(2),
                    }),
                );
            }
            "starts_with_string" | "ends_with_string" if args.len() == 1 => {
                return Call::new(size(&args[0]).factor(STRING_TRAVERSAL).add(arg_sum), None);
            }
            "in_list" if args.len() == 2 => {
                return Call::new(size(&args[1]).factor(1.0).add(arg_sum), None);
            }
            "matches_string" | "matches" => {
                // cel-go v0.29 (Kubernetes 1.37) costs the global form too.
                let (text, regex) = match (id, target) {
                    ("matches_string", Some(t)) if args.len() == 1 => (t, &args[0]),
                    ("matches", None) if args.len() == 2 && self.minor >= 37 => {
                        (&args[0], &args[1])
                    }
                    _ => return Call::new(Range::fixed(1).add(arg_sum), None),
                };
                let text = size(text).add(Range::fixed(1)).factor(STRING_TRAVERSAL);
                let regex = size(regex).factor(REGEX_LENGTH);
                return Call::new(text.multiply(regex).add(arg_sum), None);
            }
            "contains_string" if target.is_some() && args.len() == 1 => {
                let text = size(target.unwrap()).factor(STRING_TRAVERSAL);
                let sub = size(&args[0]).factor(STRING_TRAVERSAL);
                return Call::new(text.multiply(sub).add(arg_sum), None);
            }
            "logical_or" | "logical_and" => {
                let (lhs, rhs) = (arg_costs[0], arg_costs[1]);
                return Call::new(
                    Range {
                        min: lhs.min,
                        max: lhs.add(rhs).max,
                    },
                    None,
                );
            }
            "conditional" => {
                let result = size(&args[1]).union(size(&args[2]));
                if let Expr::Call(call) = &e.expr {
                    let entries = union_entries(
                        self.entry_size(&call.args[1]),
                        self.entry_size(&call.args[2]),
                    );
                    self.set_entry_size(e, entries);
                }
                let cost = arg_costs[0].add(arg_costs[1].union(arg_costs[2]));
                return Call::new(cost, Some(result));
            }
            "add_string" | "add_bytes" | "add_list" if args.len() == 2 => {
                let result = size(&args[0]).add(size(&args[1]));
                if let Expr::Call(call) = &e.expr {
                    let entries = union_entries(
                        self.entry_size(&call.args[0]),
                        self.entry_size(&call.args[1]),
                    );
                    self.set_entry_size(e, entries);
                }
                let cost = if id == "add_list" {
                    Range::fixed(1)
                } else {
                    result.factor(STRING_TRAVERSAL)
                };
                return Call::new(cost.add(arg_sum), Some(result));
            }
            "less_string"
            | "greater_string"
            | "less_equals_string"
            | "greater_equals_string"
            | "less_bytes"
            | "greater_bytes"
            | "less_equals_bytes"
            | "greater_equals_bytes"
            | "equals"
            | "not_equals" => {
                let smallest = size(&args[0]).max.min(size(&args[1]).max);
                let cost = Range {
                    min: u64::from(smallest > 0),
                    max: smallest,
                };
                return Call::new(cost.factor(STRING_TRAVERSAL).add(arg_sum), None);
            }
            _ => {}
        }
        Call::new(Range::fixed(1).add(arg_sum), None)
    }

    /// cel-go ext's overload estimators (lists version 3, sets), by overload id.
    pub(super) fn overload_estimate<'e>(
        &mut self,
        id: &str,
        target: Option<&Node<'e>>,
        args: &[Node<'e>],
    ) -> Option<Call> {
        let size = |n: &Node<'_>| n.size.unwrap_or(UNKNOWN);
        let allocating = |factor: f64, list: Range| {
            Call::new(
                list.factor(factor)
                    .add(Range::fixed(1))
                    .add(Range::fixed(LIST_CREATE)),
                Some(list),
            )
        };
        let sorting = |node: &Node<'_>, string: bool| {
            let sz = size(node);
            allocating(
                if string { 2.0 + STRING_TRAVERSAL } else { 2.0 },
                sz.multiply(sz),
            )
        };
        match id {
            "list_sets_contains_list"
            | "list_sets_intersects_list"
            | "list_sets_equivalent_list" => {
                if args.len() != 2 {
                    return None;
                }
                let factor = if id == "list_sets_equivalent_list" {
                    2.0
                } else {
                    1.0
                };
                let cost = size(&args[0])
                    .multiply(size(&args[1]))
                    .factor(factor)
                    .add(Range::fixed(1));
                Some(Call::new(cost, None))
            }
            "list_slice" => {
                let (target, [start, end]) = (target?, args) else {
                    return None;
                };
                let sz = size(target);
                let end = int_literal(end, sz.max);
                let start = int_literal(start, 0);
                Some(allocating(1.0, Range::fixed(end.wrapping_sub(start))))
            }
            "lists_range" => {
                if target.is_some() || args.len() != 1 {
                    return None;
                }
                Some(allocating(
                    1.0,
                    Range::fixed(int_literal(&args[0], u64::MAX)),
                ))
            }
            "list_reverse" => {
                if args.is_empty() {
                    Some(allocating(1.0, size(target?)))
                } else {
                    None
                }
            }
            "list_flatten" | "list_flatten_int" => {
                let target = target?;
                let depth = match args {
                    [] => 1,
                    [depth] => int_literal(depth, u64::MAX),
                    _ => return None,
                };
                Some(allocating(depth as f64, size(target)))
            }
            "list_distinct" => {
                let sz = size(target?);
                args.is_empty().then(|| allocating(2.0, sz.multiply(sz)))
            }
            _ if id.ends_with("_sort") && id.starts_with("list_") => {
                let string = id == "list_string_sort" || id == "list_bytes_sort";
                (args.is_empty()).then(|| sorting(target.unwrap(), string))
            }
            _ if id.ends_with("_sortByAssociatedKeys") => {
                let string = id.starts_with("list_string_") || id.starts_with("list_bytes_");
                (target.is_some() && args.len() == 1).then(|| sorting(&args[0], string))
            }
            _ => None,
        }
    }

    /// k8s.io/apiserver library/cost.go `EstimateCallCost` (DRA's own returns nothing), by
    /// function name.
    pub(super) fn kubernetes_estimate<'e>(
        &mut self,
        function: &str,
        target: Option<&Node<'e>>,
        args: &[Node<'e>],
    ) -> Option<Call> {
        let size = |n: &Node<'_>| {
            n.size
                .or_else(|| n.path.as_deref().and_then(dra_size))
                .unwrap_or(UNKNOWN)
        };
        let one = || Some(Call::new(Range::fixed(1), None));
        let includes = self.minor >= 37 && function == "includes";
        match function {
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" | "includes"
                if (function != "includes" || includes) =>
            {
                let target = target?;
                let Some(elem) = target.ty.first_parameter() else {
                    // A string, for indexOf and lastIndexOf.
                    return Some(Call::new(size(target).factor(STRING_TRAVERSAL), None));
                };
                let path = target.path.clone().map(|mut p| {
                    p.push("@items".to_owned());
                    p
                });
                let mut element_cost = Range::fixed(1);
                if matches!(elem, Ty::String | Ty::Bytes) {
                    let elem_size = path.as_deref().and_then(dra_size).unwrap_or(UNKNOWN);
                    element_cost = element_cost.add(elem_size.factor(STRING_TRAVERSAL));
                }
                Some(Call::new(size(target).multiply(element_cost), None))
            }
            "lowerAscii" | "upperAscii" | "substring" | "trim" => {
                let sz = size(target?);
                Some(Call::new(sz.factor(STRING_TRAVERSAL), Some(sz)))
            }
            "replace" if target.is_some() && args.len() >= 2 => {
                let sz = size(target.unwrap());
                let (from, to) = (size(&args[0]), size(&args[1]));
                Some(Call::new(
                    sz.factor(2.0 * STRING_TRAVERSAL),
                    Some(replaced_size(sz, from, to)),
                ))
            }
            "split" => {
                let sz = size(target?);
                let max = match args.get(1).and_then(|a| a.expr) {
                    Some(IdedExpr {
                        expr: Expr::Literal(LiteralValue::Int(n)),
                        ..
                    }) => *n.inner() as u64,
                    _ => sz.max,
                };
                Some(Call::new(
                    sz.factor(2.0 * STRING_TRAVERSAL),
                    Some(Range { min: 0, max }),
                ))
            }
            "join" => {
                let target = target?;
                let list = size(target);
                let mut sz = Range::fixed(0);
                if let Some(_elem) = target.ty.first_parameter() {
                    let path = target.path.clone().map(|mut p| {
                        p.push("@items".to_owned());
                        p
                    });
                    let elem_size = path.as_deref().and_then(dra_size).unwrap_or(UNKNOWN);
                    sz = list.multiply(elem_size);
                }
                if let Some(separator) = args.first() {
                    let separators = Range {
                        min: list.min.saturating_sub(1),
                        max: list.max.saturating_sub(1),
                    };
                    sz = sz.add(size(separator).multiply(separators));
                }
                Some(Call::new(sz.factor(STRING_TRAVERSAL), Some(sz)))
            }
            "find" | "findAll" if target.is_some() && !args.is_empty() => {
                let sz = size(target.unwrap());
                let text = sz.add(Range::fixed(1)).factor(STRING_TRAVERSAL);
                let regex = size(&args[0]).factor(REGEX_LENGTH);
                Some(Call::new(
                    text.multiply(regex),
                    Some(Range {
                        min: 0,
                        max: sz.max,
                    }),
                ))
            }
            "url" | "jsonpatch.escapeKey" if args.len() == 1 => {
                let sz = size(&args[0]);
                Some(Call::new(sz.factor(STRING_TRAVERSAL), Some(sz)))
            }
            "cidr" | "isIP" | "isCIDR" | "ip" | "quantity" | "isQuantity" | "semver"
            | "isSemver"
                if !args.is_empty() =>
            {
                Some(Call::new(size(&args[0]).factor(STRING_TRAVERSAL), None))
            }
            "ip.isCanonical" if !args.is_empty() => Some(Call::new(
                size(&args[0]).factor(2.0 * STRING_TRAVERSAL),
                None,
            )),
            "check" => Some(Call::new(Range::fixed(350_000), None)),
            "serviceAccount"
            | "path"
            | "group"
            | "resource"
            | "subresource"
            | "namespace"
            | "name"
            | "allowed"
            | "reason"
            | "error"
            | "errored"
            | "masked"
            | "prefixLength"
            | "family"
            | "isUnspecified"
            | "isLoopback"
            | "isLinkLocalMulticast"
            | "isLinkLocalUnicast"
            | "isGlobalUnicast"
            | "format.named"
            | "sign"
            | "asInteger"
            | "isInteger"
            | "asApproximateFloat"
            | "isGreaterThan"
            | "isLessThan"
            | "compareTo"
            | "add"
            | "sub"
            | "major"
            | "minor"
            | "patch"
            | "getScheme"
            | "getHostname"
            | "getHost"
            | "getPort"
            | "getEscapedPath"
            | "getQuery" => one(),
            operators::EQUALS if args.len() == 2 => {
                let same = args[0].ty == args[1].ty;
                (same && matches!(args[0].ty, Ty::Semver | Ty::Quantity))
                    .then(|| Call::new(Range::fixed(1), None))
            }
            _ => None,
        }
    }
}

#[derive(Clone, Copy)]
pub(super) enum Iteration {
    Single,
    Key,
    Value,
}

/// The size of `s.replace(from, to)` (k8s library/cost.go).
pub(super) fn replaced_size(sz: Range, from: Range, to: Range) -> Range {
    let (mut count, mut retained) = (Range::fixed(0), Range::fixed(0));
    if from.min == 0 {
        count.max = if sz.max < u64::MAX {
            sz.max + 1
        } else {
            sz.max
        };
        retained.max = sz.max;
    } else if to.max <= from.min {
        retained.max = sz.max;
    } else {
        count.max = (sz.max as f64 / from.min as f64).ceil() as u64;
    }
    if from.max == 0 {
        count.min = if sz.min < u64::MAX {
            sz.min + 1
        } else {
            sz.min
        };
        retained.min = sz.min;
    } else if from.max <= to.min {
        retained.min = sz.min;
    } else {
        count.min = (sz.min as f64 / from.max as f64).ceil() as u64;
    }
    count.multiply(to).add(retained)
}

/// cel-go ext `nodeAsIntValue`: an int literal's value (0 for a negative one), else `default`.
pub(super) fn int_literal(node: &Node<'_>, default: u64) -> u64 {
    match node.expr.map(|e| &e.expr) {
        Some(Expr::Literal(LiteralValue::Int(n))) => u64::try_from(*n.inner()).unwrap_or(0),
        _ => default,
    }
}

/// cel-go `computeExprSize`: a literal's or a literal list's or map's size.
pub(super) fn expr_size(e: &IdedExpr) -> Option<Range> {
    let n = match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => s.inner().chars().count() as u64,
        Expr::Literal(LiteralValue::Bytes(b)) => b.inner().len() as u64,
        Expr::Literal(_) => 1,
        Expr::List(list) => list.elements.len() as u64,
        Expr::Map(map) => map.entries.len() as u64,
        _ => return None,
    };
    Some(Range::fixed(n))
}

/// cel-go `isBind`: the shape `cel.bind` expands to.
pub(super) fn is_bind(c: &ComprehensionExpr) -> bool {
    matches!(&c.iter_range.expr, Expr::List(l) if l.elements.is_empty())
        && matches!(&c.loop_cond.expr, Expr::Literal(LiteralValue::Boolean(b)) if !*b.inner())
        && c.accu_var != ACCUMULATOR
}
