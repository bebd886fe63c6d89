//! The `device` variable (dra cel/compile.go `DeviceMatches`): `driver`, `attributes` and
//! `capacity` by domain, `allowMultipleAllocations`. It reads the device in place, so an
//! attribute becomes a CEL value only when a selector reads it; an unknown domain is an empty
//! map, an unknown name inside one is `no such key: <name>`.

use std::fmt;
use std::sync::{Arc, OnceLock};

use cel::common::ast::{Expr, IdedExpr};
use cel::common::traits::{self, Container, Indexer, Iterable, Sizer};
use cel::common::types::{CelBool, CelInt, CelString, MAP_TYPE, Type};
use cel::common::value::{CowVal, Val};
use cel::{Context, ExecutionError};

use super::quantity::{Quantity, QuantityError};
use super::semver::{Semver, SemverError};
use super::{env, visit};
use crate::explain::{AttributeValue, DeviceView, split_qualified};

/// The `device` variable of one device, shared by every selector evaluated on it. It reads the
/// device in place: an attribute becomes a CEL value only when an expression reads it, so
/// building one costs nothing per attribute (a fleet has 40,000 GPUs of 25 attributes each,
/// and a selector reads two or three).
#[derive(Clone)]
pub(crate) struct DeviceValue<'a> {
    driver: CelString<'a>,
    attributes: Domains<'a>,
    capacity: Domains<'a>,
    allow_multiple_allocations: CelBool,
    /// The Kubernetes minor release: `lists.range` is charged and bounded per cel-go version.
    pub(super) minor: u32,
}

impl fmt::Debug for DeviceValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceValue({})", self.attributes.device.id())
    }
}

/// Why a device has no CEL value, in the scheduler's words: its DeviceMatches fails every
/// selector on the device with this.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConversionError {
    #[error("attribute {0}: unsupported attribute value")]
    Unsupported(String),
    #[error("attribute {name}: parse semantic version: {source}")]
    Version { name: String, source: SemverError },
    #[error("capacity {name}: {source}")]
    Capacity { name: String, source: QuantityError },
}

impl<'a> DeviceValue<'a> {
    /// The CEL view of `device` (dra cel/compile.go `DeviceMatches`) for Kubernetes 1.`minor`'s
    /// scheduler. Like the scheduler, which converts every attribute before evaluating, a
    /// version or quantity that does not parse fails every selector on the device, whether it
    /// reads it or not.
    pub(crate) fn new(
        device: &'a dyn DeviceView,
        minor: u32,
    ) -> Result<DeviceValue<'a>, ConversionError> {
        if let Some(name) = device.unsupported_attribute() {
            return Err(ConversionError::Unsupported(name.to_owned()));
        }
        for (name, value) in device.attributes() {
            if let AttributeValue::Version(v) = value {
                Semver::parse(v).map_err(|source| ConversionError::Version {
                    name: name.to_owned(),
                    source,
                })?;
            }
        }
        for (name, quantity) in device.capacities() {
            // One past what this evaluator holds is undecided where a selector reads it.
            match Quantity::parse(quantity) {
                Err(source) if !source.is_gap() => {
                    return Err(ConversionError::Capacity {
                        name: name.to_owned(),
                        source,
                    });
                }
                _ => {}
            }
        }
        let domains = |capacity| Domains {
            device,
            capacity,
            keys: OnceLock::new(),
        };
        Ok(DeviceValue {
            driver: CelString::from(device.driver()),
            attributes: domains(false),
            capacity: domains(true),
            allow_multiple_allocations: CelBool::from(
                sees_multiple_allocations(minor)
                    && device.allow_multiple_allocations().unwrap_or(false),
            ),
            minor,
        })
    }

    pub(super) fn context(&self) -> Context<'_, '_> {
        let mut context = Context::with_env(Arc::clone(env::environment_arc()));
        context.add_variable_as_val("device", Box::new(DeviceRef(self)));
        context
    }
}

/// Whether CEL's `device.allowMultipleAllocations` is the device's field in Kubernetes
/// 1.`minor`: 1.35's default gates pick the incubating allocator, whose `selectorsMatch`
/// (allocator_incubating.go v0.35.10) leaves it out, so it is false whatever the slice says;
/// 1.34's (experimental: DeviceStatus) and 1.36's on (incubating, ConsumableCapacity) pass it.
pub(super) fn sees_multiple_allocations(minor: u32) -> bool {
    minor != 35
}

/// What cel-go's checker knows on `device`.
const FIELDS: [&str; 4] = [
    "driver",
    "attributes",
    "capacity",
    "allowMultipleAllocations",
];

/// A field of `device` cel-go's checker does not know.
#[derive(Debug, thiserror::Error)]
#[error("undefined field '{field}' on device (valid: {})", FIELDS.join(", "))]
pub(super) struct UnknownField {
    field: String,
}

/// The fields cel-go's checker knows on `device` (the `kubernetes.DRADevice` object type): any
/// other is a compile error there, so it is not evaluated here either.
pub(super) fn check_device_fields(expr: &IdedExpr) -> Result<(), UnknownField> {
    let mut problem = None;
    visit(expr, &mut |e| {
        if let Expr::Select(select) = &e.expr
            && matches!(&select.operand.expr, Expr::Ident(v) if v == "device")
            && !FIELDS.contains(&select.field.as_str())
            && problem.is_none()
        {
            problem = Some(UnknownField {
                field: select.field.clone(),
            });
        }
    });
    problem.map_or(Ok(()), Err)
}

pub(super) static DEVICE_TYPE: Type = Type::new_unspecified_type("kubernetes.DRADevice");

/// `device`, borrowing the per-device value: binding it to a context copies nothing.
#[derive(Debug)]
pub(super) struct DeviceRef<'a>(&'a DeviceValue<'a>);

impl Val for DeviceRef<'_> {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }
    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(DeviceRef(self.0))
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
}

impl Indexer for DeviceRef<'_> {
    fn get<'b, 'v>(&'b self, field: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let device = self.0;
        match field.downcast_ref::<CelString>().map(CelString::inner) {
            Some("driver") => Ok(CowVal::Borrowed(&device.driver)),
            Some("attributes") => Ok(CowVal::Borrowed(&device.attributes)),
            Some("capacity") => Ok(CowVal::Borrowed(&device.capacity)),
            Some("allowMultipleAllocations") => {
                Ok(CowVal::Borrowed(&device.allow_multiple_allocations))
            }
            Some(other) => Err(ExecutionError::no_such_key(other)),
            None => Err(ExecutionError::UnexpectedType {
                got: field.get_type().name().to_owned(),
                want: "string".to_owned(),
            }),
        }
    }

    fn steal<'v>(self: Box<Self>, field: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(field).map(CowVal::into_owned)
    }
}

/// `device.attributes` / `device.capacity`: domain → map, where an unknown domain is an empty
/// map (dra cel/compile.go `newStringInterfaceMapWithDefault`), so
/// `device.attributes["other.example.com"].x` is `no such key: x`, not `no such key:
/// other.example.com`, and `has()` on it is false.
#[derive(Clone)]
pub(super) struct Domains<'a> {
    device: &'a dyn DeviceView,
    capacity: bool,
    /// The domains as CEL strings, made only if an expression iterates over them.
    keys: OnceLock<Vec<CelString<'static>>>,
}

/// The qualified names of a device's attributes (or capacities).
pub(super) fn names<'a>(
    device: &'a dyn DeviceView,
    capacity: bool,
) -> Box<dyn Iterator<Item = &'a str> + 'a> {
    if capacity {
        Box::new(device.capacities().map(|(name, _)| name))
    } else {
        Box::new(device.attributes().map(|(name, _)| name))
    }
}

impl<'a> Domains<'a> {
    fn domains(&self) -> Vec<&'a str> {
        let mut domains: Vec<&str> = Vec::new();
        for name in names(self.device, self.capacity) {
            let (domain, _) = split_qualified(name, self.device.driver());
            if !domains.contains(&domain) {
                domains.push(domain);
            }
        }
        domains
    }
}

/// One domain of `device.attributes` or `device.capacity`: looks the name up when read.
#[derive(Clone)]
pub(super) struct Domain<'a> {
    device: &'a dyn DeviceView,
    capacity: bool,
    domain: String,
    keys: OnceLock<Vec<CelString<'static>>>,
}

impl<'a> Domain<'a> {
    fn ids(&self) -> impl Iterator<Item = &'a str> + '_ {
        let driver = self.device.driver();
        names(self.device, self.capacity).filter_map(move |name| {
            let (domain, id) = split_qualified(name, driver);
            (domain == self.domain).then_some(id)
        })
    }

    fn value(&self, id: &str) -> Option<Result<Box<dyn Val + 'a>, ExecutionError>> {
        let driver = self.device.driver();
        let matches = |name: &str| split_qualified(name, driver) == (self.domain.as_str(), id);
        if self.capacity {
            let (_, quantity) = self.device.capacities().find(|(name, _)| matches(name))?;
            return Some(
                Quantity::parse(quantity)
                    .map(|q| Box::new(q) as Box<dyn Val>)
                    .map_err(|e| {
                        if e.is_gap() {
                            super::gap(e.to_string())
                        } else {
                            ExecutionError::function_error("capacity", e)
                        }
                    }),
            );
        }
        let (_, value) = self.device.attributes().find(|(name, _)| matches(name))?;
        Some(Ok(match value {
            AttributeValue::Bool(b) => Box::new(CelBool::from(b)),
            AttributeValue::Int(i) => Box::new(CelInt::from(i)),
            AttributeValue::String(s) => Box::new(CelString::from(s)),
            AttributeValue::Version(v) => match Semver::parse(v) {
                Ok(v) => Box::new(v),
                Err(e) => return Some(Err(ExecutionError::function_error("semver", e))),
            },
        }))
    }
}

/// The `Val` plumbing shared by [`Domains`] and [`Domain`]: a map with an indexer, `in`,
/// iteration over its keys and `size()`.
macro_rules! map_val {
    ($t:ident) => {
        impl fmt::Debug for $t<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($t), self.device.name())
            }
        }

        impl Val for $t<'_> {
            fn get_type(&self) -> &Type {
                &MAP_TYPE
            }
            fn cel_type() -> &'static Type {
                &MAP_TYPE
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
            where
                Self: 'v,
            {
                Box::new(self.clone())
            }
            fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
            where
                Self: 'v,
            {
                Some(self)
            }
            fn as_container(&self) -> Option<&dyn Container> {
                Some(self)
            }
            fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
            where
                Self: 'v,
            {
                Some(self)
            }
            fn as_sizer(&self) -> Option<&dyn Sizer> {
                Some(self)
            }
        }
    };
}

map_val!(Domains);
map_val!(Domain);

pub(super) fn string_key(key: &dyn Val) -> Result<&str, ExecutionError> {
    key.downcast_ref::<CelString>()
        .map(CelString::inner)
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: key.get_type().name().to_owned(),
            want: "string".to_owned(),
        })
}

impl Indexer for Domains<'_> {
    fn get<'b, 'v>(&'b self, key: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        Ok(CowVal::owned(Domain {
            device: self.device,
            capacity: self.capacity,
            domain: string_key(key)?.to_owned(),
            keys: OnceLock::new(),
        }))
    }

    fn steal<'v>(self: Box<Self>, key: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(key).map(CowVal::into_owned)
    }
}

impl Container for Domains<'_> {
    fn contains(&self, key: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(key
            .downcast_ref::<CelString>()
            .is_some_and(|k| self.domains().contains(&k.inner())))
    }
}

impl Iterable for Domains<'_> {
    fn iter<'b, 'v>(&'b self) -> Box<dyn traits::Iterator<'b, 'v> + 'b>
    where
        Self: 'v,
    {
        let keys = self.keys.get_or_init(|| {
            self.domains()
                .into_iter()
                .map(|d| CelString::from(d.to_owned()))
                .collect()
        });
        Box::new(KeyIter(keys.iter()))
    }
}

impl Sizer for Domains<'_> {
    fn size(&self) -> CelInt {
        CelInt::from(self.domains().len() as i64)
    }
}

impl Indexer for Domain<'_> {
    fn get<'b, 'v>(&'b self, key: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let id = string_key(key)?;
        match self.value(id) {
            Some(value) => value.map(CowVal::Owned),
            None => Err(ExecutionError::no_such_key(id)),
        }
    }

    fn steal<'v>(self: Box<Self>, key: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(key).map(CowVal::into_owned)
    }
}

impl Container for Domain<'_> {
    fn contains(&self, key: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(key
            .downcast_ref::<CelString>()
            .is_some_and(|k| self.ids().any(|id| id == k.inner())))
    }
}

impl Iterable for Domain<'_> {
    fn iter<'b, 'v>(&'b self) -> Box<dyn traits::Iterator<'b, 'v> + 'b>
    where
        Self: 'v,
    {
        let keys = self.keys.get_or_init(|| {
            self.ids()
                .map(|id| CelString::from(id.to_owned()))
                .collect()
        });
        Box::new(KeyIter(keys.iter()))
    }
}

impl Sizer for Domain<'_> {
    fn size(&self) -> CelInt {
        CelInt::from(self.ids().count() as i64)
    }
}

pub(super) struct KeyIter<'b>(std::slice::Iter<'b, CelString<'static>>);

impl<'b, 'v> traits::Iterator<'b, 'v> for KeyIter<'b> {
    fn next(&mut self) -> Option<&'b (dyn Val + 'v)> {
        self.0.next().map(|k| k as &dyn Val)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;

    #[test]
    fn device_fields() {
        is(r#"device.driver == "media.liken.sh""#, true);
        is(
            r#"device.attributes["media.liken.sh"].decodeHEVCMain10"#,
            true,
        );
        is(r#"device.attributes["media.liken.sh"].scale10bit"#, false);
        is(r#"device.attributes["media.liken.sh"].cores >= 8"#, true);
        is(
            r#"device.attributes["resource.kubernetes.io"].pciBusID == "0000:00:02.0""#,
            true,
        );
        is("device.allowMultipleAllocations", true);
    }

    #[test]
    fn unknown_domain_is_an_empty_map() {
        is(r#"size(device.attributes["liken.sh"]) == 0"#, true);
        is(r#"has(device.attributes["liken.sh"].renderNode)"#, false);
        is(r#""liken.sh" in device.attributes"#, false);
        is(r#""media.liken.sh" in device.attributes"#, true);
        error(
            r#"device.attributes["liken.sh"].renderNode"#,
            "no such key: renderNode",
        );
        is(r#"size(device.capacity["other.example.com"]) == 0"#, true);
        // The maps behave as maps: size, iteration and `in` over domains and names.
        is(
            r#"size(device.attributes) == 3 && size(device.attributes["media.liken.sh"]) == 5"#,
            true,
        );
        is(
            r#"device.attributes.exists(d, d == "resource.kubernetes.io")"#,
            true,
        );
        is(
            r#"device.attributes["resource.kubernetes.io"].all(n, n == "pciBusID")"#,
            true,
        );
        is(
            r#"device.capacity.all(d, d == "dra.example.com") && "memory" in device.capacity["dra.example.com"]"#,
            true,
        );
    }

    #[test]
    fn unknown_attribute_is_a_runtime_error() {
        error(
            r#"device.attributes["media.liken.sh"].decodeAV2"#,
            "no such key: decodeAV2",
        );
        is(
            r#"has(device.attributes["media.liken.sh"].decodeAV2)"#,
            false,
        );
        is(
            r#"has(device.attributes["media.liken.sh"].scale10bit)"#,
            true,
        );
    }

    #[test]
    fn allow_multiple_allocations_is_false_in_1_35() {
        let device = gpu();
        let by = |minor| evaluate_one("device.allowMultipleAllocations", &device, minor);
        assert_eq!(by(34), Outcome::Match(true));
        assert_eq!(by(35), Outcome::Match(false));
        assert_eq!(by(36), Outcome::Match(true));
        assert_eq!(by(37), Outcome::Match(true));
    }
}
