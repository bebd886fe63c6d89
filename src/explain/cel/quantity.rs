//! The Quantity library (k8s.io/apiserver pkg/cel/library/quantity.go): capacities and
//! `quantity()` values are k8s.io/apimachinery `resource.Quantity`s.

use cel::common::types::{CelBool, CelDouble, CelInt, INT_TYPE, STRING_TYPE, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{Env, ExecutionError};

use super::env::{arg, ordering_int, owned, string_arg};

pub(super) static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

/// A Kubernetes resource quantity, kept exactly in nano-units (the API's finest scale; finer
/// digits round up, as `resource.Quantity` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Quantity {
    nanos: i128,
}

impl Quantity {
    /// Parses the API's quantity syntax: a signed decimal number and an optional suffix (binary
    /// `Ki`..`Ei`, decimal `n u m "" k M G T P E`, or an exponent `e3`/`E3`).
    pub(crate) fn parse(text: &str) -> Result<Quantity, String> {
        let bad = || {
            format!(
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text:?}"
            )
        };
        let (sign, rest) = match text.as_bytes().first() {
            Some(b'-') => (-1i128, &text[1..]),
            Some(b'+') => (1, &text[1..]),
            _ => (1, text),
        };
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(split);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(bad());
        }
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        // (multiplier numerator, base-10 exponent)
        let (mult, exp10): (i128, i32) = match suffix {
            "" => (1, 0),
            "Ki" => (1 << 10, 0),
            "Mi" => (1 << 20, 0),
            "Gi" => (1 << 30, 0),
            "Ti" => (1 << 40, 0),
            "Pi" => (1 << 50, 0),
            "Ei" => (1 << 60, 0),
            "n" => (1, -9),
            "u" => (1, -6),
            "m" => (1, -3),
            "k" => (1, 3),
            "M" => (1, 6),
            "G" => (1, 9),
            "T" => (1, 12),
            "P" => (1, 15),
            "E" => (1, 18),
            s if s.starts_with(['e', 'E']) => (1, s[1..].parse::<i32>().map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        let digits: String = format!("{whole}{frac}");
        let digits = digits.trim_start_matches('0');
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| bad())?
        };
        // value = mantissa * 10^(exp10 - frac.len()) * mult; in nanos: * 10^9.
        let scale = exp10 - frac.len() as i32 + 9;
        let too_big = || format!("quantity {text:?} is too large");
        let mut nanos = mantissa.checked_mul(mult).ok_or_else(too_big)?;
        if scale >= 0 {
            nanos = nanos
                .checked_mul(10i128.checked_pow(scale as u32).ok_or_else(too_big)?)
                .ok_or_else(too_big)?;
        } else {
            let divisor = 10i128.checked_pow((-scale) as u32).unwrap_or(i128::MAX);
            // Below a nano: round up, away from zero, as resource.Quantity does.
            nanos = nanos / divisor + i128::from(nanos % divisor != 0);
        }
        Ok(Quantity {
            nanos: sign * nanos,
        })
    }

    fn from_int(i: i64) -> Quantity {
        Quantity {
            nanos: i128::from(i) * 1_000_000_000,
        }
    }
}

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }
    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>().is_some_and(|o| self == o)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for Quantity {}

pub(super) fn quantity_library(env: &mut Env) -> Result<(), cel::DeclarationError> {
    fn to_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        Quantity::parse(string_arg(&args, 0, "quantity")?)
            .map_err(|e| ExecutionError::function_error("quantity", e))
            .map(CowVal::owned)
    }
    fn is_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(
            Quantity::parse(string_arg(&args, 0, "isQuantity")?).is_ok(),
        ))
    }
    fn q(args: &[CowVal<'_, '_>], i: usize, f: &str) -> Result<Quantity, ExecutionError> {
        if let Some(i) = args.get(i).and_then(|a| a.downcast_ref::<CelInt>()) {
            return Ok(Quantity::from_int(*i.inner()));
        }
        arg::<Quantity>(args, i, f).copied()
    }
    fn greater<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(
            q(&args, 0, "isGreaterThan")? > q(&args, 1, "isGreaterThan")?,
        ))
    }
    fn less<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(
            q(&args, 0, "isLessThan")? < q(&args, 1, "isLessThan")?,
        ))
    }
    fn compare_to<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelInt::from(ordering_int(
            q(&args, 0, "compareTo")?.cmp(&q(&args, 1, "compareTo")?),
        )))
    }
    fn add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let (a, b) = (q(&args, 0, "add")?, q(&args, 1, "add")?);
        a.nanos
            .checked_add(b.nanos)
            .map(|nanos| CowVal::owned(Quantity { nanos }))
            .ok_or_else(|| ExecutionError::function_error("add", "integer overflow"))
    }
    fn sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let (a, b) = (q(&args, 0, "sub")?, q(&args, 1, "sub")?);
        a.nanos
            .checked_sub(b.nanos)
            .map(|nanos| CowVal::owned(Quantity { nanos }))
            .ok_or_else(|| ExecutionError::function_error("sub", "integer overflow"))
    }
    fn sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelInt::from(q(&args, 0, "sign")?.nanos.signum() as i64))
    }
    fn integral(q: Quantity) -> Option<i64> {
        (q.nanos % 1_000_000_000 == 0)
            .then(|| i64::try_from(q.nanos / 1_000_000_000).ok())
            .flatten()
    }
    fn is_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(integral(q(&args, 0, "isInteger")?).is_some()))
    }
    fn as_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        match integral(q(&args, 0, "asInteger")?) {
            Some(i) => owned(CelInt::from(i)),
            None => Err(ExecutionError::function_error(
                "asInteger",
                "cannot convert value to integer",
            )),
        }
    }
    fn as_float<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelDouble::from(
            q(&args, 0, "asApproximateFloat")?.nanos as f64 / 1e9,
        ))
    }
    let t = || QUANTITY_TYPE.to_owned();
    env.add_overload(
        "quantity",
        "string_to_quantity",
        vec![STRING_TYPE],
        to_quantity,
    )?;
    env.add_overload(
        "isQuantity",
        "is_quantity_string",
        vec![STRING_TYPE],
        is_quantity,
    )?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity_is_greater_than",
        t(),
        vec![t()],
        greater,
    )?;
    env.add_member_overload("isLessThan", "quantity_is_less_than", t(), vec![t()], less)?;
    env.add_member_overload(
        "compareTo",
        "quantity_compare_to",
        t(),
        vec![t()],
        compare_to,
    )?;
    env.add_member_overload("add", "quantity_add", t(), vec![t()], add)?;
    env.add_member_overload("add", "quantity_add_int", t(), vec![INT_TYPE], add)?;
    env.add_member_overload("sub", "quantity_sub", t(), vec![t()], sub)?;
    env.add_member_overload("sub", "quantity_sub_int", t(), vec![INT_TYPE], sub)?;
    // A global function (`sign(q)`), not a method, in quantity.go.
    env.add_overload("sign", "quantity_sign", vec![t()], sign)?;
    env.add_member_overload("isInteger", "quantity_is_integer", t(), vec![], is_integer)?;
    env.add_member_overload("asInteger", "quantity_as_integer", t(), vec![], as_integer)?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity_as_float",
        t(),
        vec![],
        as_float,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;

    #[test]
    fn quantity_on_capacities() {
        is(
            r#"device.capacity["dra.example.com"].memory.compareTo(quantity("8Gi")) > 0"#,
            true,
        );
        is(
            r#"device.capacity["dra.example.com"].memory.isGreaterThan(quantity("16G"))"#,
            true,
        );
        is(
            r#"device.capacity["dra.example.com"].memory.isLessThan(quantity("17179869185"))"#,
            true,
        );
        is(
            r#"device.capacity["dra.example.com"].memory == quantity("16384Mi")"#,
            true,
        );
        is(
            r#"device.capacity["dra.example.com"].memory.asInteger() == 17179869184"#,
            true,
        );
        is(
            r#"quantity("1.5").isInteger() == false && quantity("1500m").asApproximateFloat() == 1.5"#,
            true,
        );
        is(
            r#"quantity("1k").add(24).compareTo(quantity("1024")) == 0"#,
            true,
        );
        is(
            r#"sign(quantity("-1")) == -1 && sign(quantity("0")) == 0 && isQuantity("2Gi") && !isQuantity("2 Gi")"#,
            true,
        );
        error(
            r#"quantity("1.5").asInteger() == 1"#,
            "cannot convert value to integer",
        );
    }
}
