//! The Quantity library (k8s.io/apiserver pkg/cel/library/quantity.go): capacities and
//! `quantity()` values are k8s.io/apimachinery `resource.Quantity`s, modelled as that type
//! holds them (an int64 with a decimal scale, or an `inf.Dec`), because `isInteger()`,
//! `asInteger()` and `asApproximateFloat()` answer from the form, not only the value:
//! `quantity("1500m").add(quantity("1500m")).isInteger()` is false.

use std::cmp::Ordering;

use cel::common::types::{CelBool, CelDouble, CelInt, INT_TYPE, STRING_TYPE, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{Env, ExecutionError};

use super::calls::{arg, ordering_int, owned, string_arg};
use super::{bounds, gap};

pub(super) static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

/// The number a quantity holds, in `resource.Quantity`'s two forms (amount.go).
#[derive(Clone, Copy, Debug)]
enum Amount {
    /// `int64Amount`: `value` × 10^`scale`.
    Int { value: i64, scale: i32 },
    /// `inf.Dec`: `unscaled` × 10^-`scale` (inf's scale counts the other way). Go's is a big
    /// integer; one past `i128` is a [`QuantityError::TooLarge`] here.
    Dec { unscaled: i128, scale: i32 },
}

/// A Kubernetes resource quantity, as `resource.Quantity` holds it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Quantity {
    amount: Amount,
    /// The result of `add` or `sub`, which cel-go holds as a `*Quantity`: `==` with one on the
    /// right of a Quantity is "no such overload" (pkg/cel/quantity.go `Equal` asserts a value).
    pointer: bool,
}

/// Why a quantity does not parse here: Go's errors (quantity.go), word for word, or a number
/// beyond what this evaluator holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QuantityError {
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// Go holds it in a big integer; `i128` does not.
    #[error("quantity {0:?} needs more than 38 digits, more than this evaluator holds")]
    TooLarge(String),
}

impl QuantityError {
    /// Whether the error is this evaluator's limit rather than Go's refusal.
    pub(crate) fn is_gap(&self) -> bool {
        matches!(self, QuantityError::TooLarge(_))
    }

    /// The error as a CEL evaluation error: a gap is undecided, Go's error is a runtime one.
    fn into_execution(self, function: &str) -> ExecutionError {
        if self.is_gap() {
            return gap(self.to_string());
        }
        ExecutionError::function_error(function, self)
    }
}

/// A sum beyond what this evaluator holds (Go's is a big integer): undecided, not an error.
#[derive(Clone, Copy, Debug, thiserror::Error)]
#[error("a quantity sum needs more than 38 digits")]
struct SumTooLarge;

/// The parts of a quantity's text (quantity.go `parseQuantityString`): sign, the number as
/// written (sign included), its integer digits without leading zeros, its fraction digits,
/// and the suffix.
fn split(text: &str) -> Result<(bool, &str, &str, &str, &str), QuantityError> {
    let b = text.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    if let Some(&c) = b.first()
        && (c == b'-' || c == b'+')
    {
        positive = c == b'+';
        pos = 1;
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok((positive, "0", "0", "", ""));
    }
    let digits_end = |from: usize| (from..end).find(|&i| !b[i].is_ascii_digit()).unwrap_or(end);
    let num_end = digits_end(pos);
    let num = if num_end == pos {
        "0"
    } else {
        &text[pos..num_end]
    };
    if num_end >= end {
        return Ok((positive, text, num, "", ""));
    }
    pos = num_end;
    let mut denom = "";
    if b[pos] == b'.' {
        let denom_end = digits_end(pos + 1);
        denom = &text[pos + 1..denom_end];
        if denom_end >= end {
            return Ok((positive, text, num, denom, ""));
        }
        pos = denom_end;
    }
    let value = &text[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    if digits_end(pos) < end {
        return Err(QuantityError::Format);
    }
    Ok((positive, value, num, denom, &text[suffix_start..]))
}

/// suffix.go `interpret`: (base, exponent, binary).
fn interpret(suffix: &str) -> Option<(u32, i32, bool)> {
    Some(match suffix {
        "" => (10, 0, false),
        "n" => (10, -9, false),
        "u" => (10, -6, false),
        "m" => (10, -3, false),
        "k" => (10, 3, false),
        "M" => (10, 6, false),
        "G" => (10, 9, false),
        "T" => (10, 12, false),
        "P" => (10, 15, false),
        "E" => (10, 18, false),
        "Ki" => (2, 10, true),
        "Mi" => (2, 20, true),
        "Gi" => (2, 30, true),
        "Ti" => (2, 40, true),
        "Pi" => (2, 50, true),
        "Ei" => (2, 60, true),
        // Parsed as an int64, kept as an int32: Go truncates, and so does `as`.
        s if s.len() > 1 && s.starts_with(['e', 'E']) => {
            (10, s[1..].parse::<i64>().ok()? as i32, false)
        }
        _ => return None,
    })
}

/// `value` × 10^`times`, as math.go `positiveScaleInt64` checks it.
fn scale_up_i64(value: i64, times: i64) -> Option<i64> {
    // Each step grows the magnitude, so no step overflowed where the result fits.
    scale_up(value.into(), times).and_then(|v| i64::try_from(v).ok())
}

/// `value` × 10^`times` in `i128`, `None` past it.
fn scale_up(value: i128, times: i64) -> Option<i128> {
    if value == 0 {
        return Some(0);
    }
    // A non-zero value overflows within 39 steps, so the loop is short.
    let mut v = value;
    for _ in 0..times {
        v = v.checked_mul(10)?;
    }
    Some(v)
}

/// Go's `math.Pow10`, table for table: its product is not always the nearest double.
fn pow10(n: i64) -> f64 {
    const TAB: [f64; 32] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31,
    ];
    const POS32: [f64; 10] = [
        1e0, 1e32, 1e64, 1e96, 1e128, 1e160, 1e192, 1e224, 1e256, 1e288,
    ];
    const NEG32: [f64; 11] = [
        1e-0, 1e-32, 1e-64, 1e-96, 1e-128, 1e-160, 1e-192, 1e-224, 1e-256, 1e-288, 1e-320,
    ];
    match n {
        0..=308 => POS32[n as usize / 32] * TAB[n as usize % 32],
        -323..=-1 => NEG32[(-n) as usize / 32] / TAB[(-n) as usize % 32],
        n if n > 0 => f64::INFINITY,
        _ => 0.0,
    }
}

impl Amount {
    /// The value as mantissa × 10^exponent.
    fn decimal(self) -> (i128, i64) {
        match self {
            Amount::Int { value, scale } => (i128::from(value), i64::from(scale)),
            Amount::Dec { unscaled, scale } => (unscaled, -i64::from(scale)),
        }
    }

    /// `AsDec`: the Dec form (scale as inf counts it).
    fn as_dec(self) -> (i128, i64) {
        let (m, e) = self.decimal();
        (m, -e)
    }

    fn sign(self) -> i64 {
        self.decimal().0.signum() as i64
    }

    /// `Cmp`: the values compared exactly, whatever their forms.
    fn cmp(self, other: Amount) -> Ordering {
        let ((m1, e1), (m2, e2)) = (self.decimal(), other.decimal());
        let (s1, s2) = (m1.signum(), m2.signum());
        if s1 != s2 || s1 == 0 {
            return s1.cmp(&s2);
        }
        // Same sign, both non-zero: compare magnitudes; one past i128 is the larger.
        let (a, b) = (m1.unsigned_abs(), m2.unsigned_abs());
        let up = |m: u128, times: i64| -> Option<u128> {
            let mut v = m;
            for _ in 0..times {
                v = v.checked_mul(10)?;
            }
            Some(v)
        };
        let magnitude = if e1 >= e2 {
            up(a, e1 - e2).map_or(Ordering::Greater, |a| a.cmp(&b))
        } else {
            up(b, e2 - e1).map_or(Ordering::Less, |b| a.cmp(&b))
        };
        if s1 > 0 {
            magnitude
        } else {
            magnitude.reverse()
        }
    }

    /// `int64Amount.Add`: `None` where it overflows (Go then adds as Decs).
    fn int_add(a: (i64, i32), b: (i64, i32)) -> Option<(i64, i32)> {
        let ((av, ascale), (bv, bscale)) = (a, b);
        if bv == 0 {
            return Some(a);
        }
        if av == 0 {
            return Some(b);
        }
        match ascale.cmp(&bscale) {
            Ordering::Equal => Some((av.checked_add(bv)?, ascale)),
            Ordering::Greater => {
                let c = scale_up_i64(av, i64::from(ascale) - i64::from(bscale))?;
                Some((c.checked_add(bv)?, bscale))
            }
            Ordering::Less => {
                let c = scale_up_i64(bv, i64::from(bscale) - i64::from(ascale))?;
                Some((av.checked_add(c)?, ascale))
            }
        }
    }

    /// `Quantity.Add` (`negate`: `Sub`): int64 arithmetic while it fits, else a Dec at the
    /// larger of the two scales (inf `Add`).
    fn add(self, other: Amount, negate: bool) -> Result<Amount, SumTooLarge> {
        if let (
            Amount::Int {
                value: av,
                scale: a,
            },
            Amount::Int {
                value: bv,
                scale: b,
            },
        ) = (self, other)
        {
            // int64Amount.Sub negates with Go's wrapping `-`: minus MinInt64 adds it.
            let bv = if negate { bv.wrapping_neg() } else { bv };
            if let Some((value, scale)) = Amount::int_add((av, a), (bv, b)) {
                return Ok(Amount::Int { value, scale });
            }
        }
        let ((x, xs), (y, ys)) = (self.as_dec(), other.as_dec());
        let y = if negate { y.checked_neg() } else { Some(y) };
        let scale = xs.max(ys);
        let x = scale_up(x, scale - xs).ok_or(SumTooLarge)?;
        let y = y.and_then(|y| scale_up(y, scale - ys)).ok_or(SumTooLarge)?;
        Ok(Amount::Dec {
            unscaled: x.checked_add(y).ok_or(SumTooLarge)?,
            scale: i32::try_from(scale).map_err(|_| SumTooLarge)?,
        })
    }

    /// `AsInt64`: only the int64 form at a scale of zero or more, within int64.
    fn as_int64(self) -> Option<i64> {
        match self {
            Amount::Int { value, scale } if scale >= 0 => scale_up_i64(value, i64::from(scale)),
            _ => None,
        }
    }

    /// `AsApproximateFloat64`: base × `math.Pow10(exponent)`, as Go rounds it.
    fn as_approximate_float(self) -> f64 {
        let (base, exponent) = match self {
            Amount::Int { value, scale } => (value as f64, i64::from(scale)),
            // big.Float's Float64 rounds to nearest even, as `as` does.
            Amount::Dec { unscaled, scale } => (unscaled as f64, -i64::from(scale)),
        };
        if exponent == 0 {
            return base;
        }
        base * pow10(exponent)
    }
}

impl Quantity {
    /// Parses the API's quantity syntax as `resource.ParseQuantity` does: into the int64 form
    /// when the digits and scale allow it, else a Dec rounded up to nano units (binary values
    /// capped at the largest int64).
    pub(crate) fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let amount = Quantity::parse_amount(text)?;
        Ok(Quantity {
            amount,
            pointer: false,
        })
    }

    fn parse_amount(text: &str) -> Result<Amount, QuantityError> {
        if text.is_empty() {
            return Err(QuantityError::Format);
        }
        let (positive, value, num, denom, suffix) = split(text)?;
        let (base, exponent, binary) = interpret(suffix).ok_or(QuantityError::Suffix)?;
        let digits = (num.len() + denom.len()) as i64;
        let (mut scale, precision, mantissa) = if binary {
            if exponent >= 0 && denom.is_empty() {
                (
                    0,
                    15 - num.len() as i64 - i64::from(exponent) * 3 / 10 - 1,
                    1i64 << exponent,
                )
            } else {
                (0, -1, 1)
            }
        } else {
            (i64::from(exponent), 18 - digits, 1)
        };
        if precision >= 0 {
            scale -= denom.len() as i64;
            if scale >= -9 {
                let shifted: i64 = format!("{num}{denom}")
                    .parse()
                    .map_err(|_| QuantityError::Numeric)?;
                if let Some(result) = shifted.checked_mul(mantissa) {
                    let value = if positive { result } else { -result };
                    return Ok(Amount::Int {
                        value,
                        scale: scale as i32,
                    });
                }
            }
        }
        Quantity::parse_dec(text, value, base, exponent, binary)
    }

    /// The Dec path of `ParseQuantity`: inf `SetString` of the number as written, the suffix
    /// applied, rounded up (away from zero) to nano units.
    fn parse_dec(
        text: &str,
        value: &str,
        base: u32,
        exponent: i32,
        binary: bool,
    ) -> Result<Amount, QuantityError> {
        let too_large = || QuantityError::TooLarge(text.to_owned());
        let unsigned = value.trim_start_matches(['+', '-']);
        let negative = value.starts_with('-');
        let (whole, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        if whole.is_empty() && frac.is_empty() {
            return Err(QuantityError::Numeric);
        }
        let mut unscaled: i128 = 0;
        for d in whole.bytes().chain(frac.bytes()) {
            unscaled = unscaled
                .checked_mul(10)
                .and_then(|u| u.checked_add(i128::from(d - b'0')))
                .ok_or_else(too_large)?;
        }
        let mut scale = frac.len() as i64;
        if base == 10 {
            scale -= i64::from(exponent);
        } else {
            unscaled = unscaled
                .checked_mul(1i128 << exponent)
                .ok_or_else(too_large)?;
        }
        if unscaled != 0 {
            // Round(amount, 9, RoundUp) on the magnitude.
            if scale <= 9 {
                unscaled = scale_up(unscaled, 9 - scale).ok_or_else(too_large)?;
            } else {
                let shift = scale - 9;
                let (quotient, remainder) = if shift > 38 {
                    (0, unscaled)
                } else {
                    let d = 10i128.pow(shift as u32);
                    (unscaled / d, unscaled % d)
                };
                unscaled = quotient + i128::from(remainder != 0);
            }
            scale = 9;
        }
        // Capped at the largest int64 (`maxAllowed`); non-zero, it is at nano scale here.
        let max = i128::from(i64::MAX);
        if binary && unscaled > max * 1_000_000_000 {
            unscaled = max;
            scale = 0;
        }
        let scale = i32::try_from(scale).map_err(|_| too_large())?;
        Ok(Amount::Dec {
            unscaled: if negative { -unscaled } else { unscaled },
            scale,
        })
    }

    /// `resource.NewQuantity(i, DecimalExponent)`: what `add(int)` and `sub(int)` add.
    fn from_int(i: i64) -> Quantity {
        Quantity {
            amount: Amount::Int { value: i, scale: 0 },
            pointer: false,
        }
    }

    /// `q.add(y)` / `q.sub(y)` (library quantity.go on a copy of `q`): a `*Quantity`.
    fn plus(self, other: Quantity, negate: bool) -> Result<Quantity, ExecutionError> {
        // 1.34 to 1.36 copy `q` shallowly, so adding to a Dec changes `q` itself (1.37 copies
        // deeply): a later read of `q` would see the sum, which this model does not track.
        if bounds::minor() < 37 && matches!(self.amount, Amount::Dec { .. }) {
            return Err(gap(
                "Kubernetes 1.34 to 1.36 change a quantity beyond int64 in place when adding to it (library/quantity.go copies it shallowly); this evaluator does not model that",
            ));
        }
        let amount = self
            .amount
            .add(other.amount, negate)
            .map_err(|e| gap(e.to_string()))?;
        Ok(Quantity {
            amount,
            pointer: true,
        })
    }

    /// Whether `==` with `self` on the right of a Quantity has an overload in cel-go.
    pub(super) fn comparable_on_the_right(&self) -> bool {
        !self.pointer
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Quantity) -> bool {
        self.amount.cmp(other.amount) == Ordering::Equal
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Quantity) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Quantity) -> Ordering {
        self.amount.cmp(other.amount)
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
            .map_err(|e| e.into_execution("quantity"))
            .map(CowVal::owned)
    }
    fn is_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        match Quantity::parse(string_arg(&args, 0, "isQuantity")?) {
            Err(e) if e.is_gap() => Err(e.into_execution("isQuantity")),
            parsed => owned(CelBool::from(parsed.is_ok())),
        }
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
        let sum = q(&args, 0, "add")?.plus(q(&args, 1, "add")?, false)?;
        owned(sum)
    }
    fn sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let difference = q(&args, 0, "sub")?.plus(q(&args, 1, "sub")?, true)?;
        owned(difference)
    }
    fn sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelInt::from(q(&args, 0, "sign")?.amount.sign()))
    }
    fn is_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(
            q(&args, 0, "isInteger")?.amount.as_int64().is_some(),
        ))
    }
    fn as_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        match q(&args, 0, "asInteger")?.amount.as_int64() {
            Some(i) => owned(CelInt::from(i)),
            None => Err(ExecutionError::function_error(
                "asInteger",
                "cannot convert value to integer",
            )),
        }
    }
    fn as_float<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelDouble::from(
            q(&args, 0, "asApproximateFloat")?
                .amount
                .as_approximate_float(),
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
    use super::super::{Outcome, evaluate_one};
    use super::*;

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

    fn amount(text: &str) -> Amount {
        Quantity::parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .amount
    }

    /// The form and scale `ParseQuantity` picks (quantity_test.go TestQuantityParse's inputs).
    #[test]
    fn parse_keeps_go_s_form_and_scale() {
        for (text, form) in [
            ("0", "int 0e0"),
            ("1500m", "int 1500e-3"),
            ("1.5", "int 15e-1"),
            ("8Gi", "int 8589934592e0"),
            ("1e3", "int 1e3"),
            ("1E", "int 1e18"),
            ("100n", "int 100e-9"),
            (".", "int 0e0"),
            ("+", "int 0e0"),
            ("5.", "int 5e0"),
            ("-0.5k", "int -5e2"),
            ("1e100", "int 1e100"),
            ("0.0000000001", "dec 1e-9"),
            ("-0.0000000001", "dec -1e-9"),
            ("1.5Gi", "dec 1610612736000000000e-9"),
            ("1234567890123456789", "dec 1234567890123456789000000000e-9"),
            ("16Ei", "dec 9223372036854775807e0"),
            ("0e-20", "dec 0e-20"),
        ] {
            let got = match amount(text) {
                Amount::Int { value, scale } => format!("int {value}e{scale}"),
                Amount::Dec { unscaled, scale } => format!("dec {unscaled}e{}", -scale),
            };
            assert_eq!(got, form, "{text}");
        }
        for (text, error) in [
            ("", QuantityError::Format),
            ("1.2.3", QuantityError::Format),
            ("1Zi", QuantityError::Format),
            ("1 Gi", QuantityError::Format),
            ("1iK", QuantityError::Suffix),
            ("1e", QuantityError::Suffix),
        ] {
            assert_eq!(
                Quantity::parse(text).map(|q| q.amount.sign()),
                Err(error),
                "{text}"
            );
        }
        assert!(Quantity::parse("1e400000000000").is_ok_and(|q| q.amount.sign() == 1));
        assert!(Quantity::parse(&"9".repeat(40)).is_err_and(|e| e.is_gap()));
    }

    /// quantity_test.go TestQuantityCmp, TestAdd and TestSub, through CEL.
    #[test]
    fn compare_add_and_sub_as_go() {
        for (x, y, expect) in [
            ("0", "0", 0),
            ("100m", "50m", 1),
            ("50m", "100m", -1),
            ("10000T", "100Gi", 1),
            ("1e100", "1", 1),
            ("-1e100", "-1", -1),
            ("1234567890123456789", "1234567890123456788", 1),
        ] {
            is(
                &format!(r#"quantity("{x}").compareTo(quantity("{y}")) == {expect}"#),
                true,
            );
        }
        for (a, op, b, expected) in [
            ("10", "add", "10", "20"),
            ("10", "add", "1Ki", "1034"),
            ("0", "add", "50", "50"),
            ("50", "sub", "0", "50"),
            ("0", "sub", "50", "-50"),
            ("10", "sub", "1", "9"),
            ("999999999999999999k", "add", "1", "999999999999999999001"),
        ] {
            is(
                &format!(
                    r#"quantity("{a}").{op}(quantity("{b}")).compareTo(quantity("{expected}")) == 0"#
                ),
                true,
            );
        }
    }

    // The generated differential test's finding (1.37's seed): the sum keeps milli scale.
    #[test]
    fn is_integer_answers_from_the_form() {
        is(
            r#"quantity("1500m").add(quantity("1500m")).isInteger()"#,
            false,
        );
        is(
            r#"quantity("1500m").add(quantity("1500m")) == quantity("3")"#,
            true,
        );
        is(
            r#"quantity("0").add(quantity("1500m")).sub(quantity("1500m")).isInteger()"#,
            false,
        );
        is(
            r#"quantity("1k").isInteger() && quantity("1k").asInteger() == 1000"#,
            true,
        );
        is(
            r#"quantity("999999999999999999k").add(1).isInteger()"#,
            false,
        );
        is(r#"quantity("1e100").isInteger()"#, false);
        is(
            r#"quantity("-1e18").asInteger() == -1000000000000000000"#,
            true,
        );
        is(r#"quantity("0.5").add(quantity("0.5")).isInteger()"#, false);
        error(
            r#"quantity("1500m").add(quantity("1500m")).asInteger() == 3"#,
            "cannot convert value to integer",
        );
    }

    /// quantity_test.go TestQuantityAsApproximateFloat64: base × math.Pow10, as Go rounds it.
    #[test]
    fn approximate_floats_round_as_go() {
        is(
            r#"quantity("3e-1").asApproximateFloat() == 0.30000000000000004"#,
            true,
        );
        is(
            r#"quantity("7340032e-1").asApproximateFloat() == 734003.2000000001"#,
            true,
        );
        is(r#"quantity("12e18").asApproximateFloat() == 1.2e19"#, true);
        is(r#"quantity("1500m").asApproximateFloat() == 1.5"#, true);
        is(
            r#"quantity("12e500").asApproximateFloat() == double("Infinity")"#,
            true,
        );
        is(
            r#"quantity("-12e500").asApproximateFloat() == double("-Infinity")"#,
            true,
        );
        is(
            r#"quantity("16Ei").asApproximateFloat() == 9223372036854775807.0"#,
            true,
        );
    }

    // cel-go holds `add` and `sub` results as pointers, which `Equal` does not accept on the
    // right (checked against the oracle in every release).
    #[test]
    fn equality_refuses_a_sum_on_the_right() {
        is(r#"quantity("0").add(1) == quantity("1")"#, true);
        error(
            r#"quantity("1") == quantity("0").add(1)"#,
            "no such overload",
        );
        is(r#"quantity("1") != quantity("0").add(1)"#, true);
    }

    #[test]
    fn sums_of_dec_quantities_are_undecided_before_1_37() {
        let device = gpu();
        let expression = r#"quantity("100000000000000000000").add(1).isInteger()"#;
        assert!(matches!(
            evaluate_one(expression, &device, 36),
            Outcome::CannotEvaluate(r) if r.contains("in place")
        ));
        assert_eq!(evaluate_one(expression, &device, 37), Outcome::Match(false));
    }
}
