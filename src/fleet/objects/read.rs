//! The one reader of API answers and files: Lists, multi-document YAML and single objects routed
//! by `kind` and `apiVersion` in one pass, into [`Objects`].

use super::*;
/// Everything read from a cluster or from files: the objects of the kinds asked for, and a note
/// for each object we had to pass over.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    pub slices: Vec<ResourceSlice>,
    pub classes: Vec<DeviceClass>,
    pub claims: Vec<ResourceClaim>,
    /// The claims, when only their allocations are wanted ([`Kinds::claims_as_allocations`]).
    pub allocated: Vec<AllocatedClaim>,
    pub claim_templates: Vec<ResourceClaimTemplate>,
    pub pods: Vec<Pod>,
    pub nodes: Vec<Node>,
    pub events: Vec<Event>,
    pub taint_rules: Vec<DeviceTaintRule>,
    /// One line per object that was skipped, naming it and why.
    pub notes: Vec<String>,
    /// The objects of a kind read here that did not have its shape, by name: the target of
    /// `why` among them is an error, not a name not found.
    pub unparsed: Vec<Unparsed>,
    /// Objects passed over for having no `metadata.name` (an API server stores none): counted,
    /// never held, so a page or file of a million `{}` costs a number ([`Objects::note_nameless`]).
    pub nameless: usize,
    wanted: Kinds,
    /// The most items a List may hold: a page of a listing holds no more than its `limit`.
    max_items: Option<usize>,
}

/// How a List over [`Objects::page`]'s bound is refused (and not read again item by item).
const OVER_LIMIT: &str = "more than";

/// An object of a kind that is read which does not have its kind's shape: which one, the field
/// (a path from the object's root) and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unparsed {
    pub kind: Kind,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
    /// `spec.nodeSelector.a: invalid type: null, expected a string`, with a huge value cut.
    pub problem: String,
}

impl fmt::Display for Unparsed {
    /// `pod media/p: spec.nodeSelector.a: invalid type: null, expected a string`.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let name = qualified_name(Some(&self.namespace), Some(&self.name));
        write!(
            f,
            "{} {}: {}",
            self.kind.name().to_ascii_lowercase(),
            crate::text::elide(&name, MAX_NAME_SHOWN),
            self.problem
        )
    }
}

/// The most of a name, and of a parser's message (which quotes the value it refused), that a
/// note repeats: a value of a megabyte is cut in its middle, never repeated whole.
const MAX_NAME_SHOWN: usize = 300;
const MAX_PROBLEM_SHOWN: usize = 400;

/// What is wrong with a value, after the path to it from the object's root (`spec.x[0].y: `);
/// nothing before it when the object's root itself is wrong.
fn problem(error: &ShapeError) -> String {
    let message = error.inner().to_string();
    let message = crate::text::elide(&message, MAX_PROBLEM_SHOWN);
    match error.path().to_string().as_str() {
        "." => message.into_owned(),
        path => format!("{}: {message}", crate::text::elide(path, MAX_NAME_SHOWN)),
    }
}

/// A value that is not of its type, with the path to where.
type ShapeError = serde_path_to_error::Error<serde_json::Error>;

/// `T` from `value`, or what is wrong and where (worded by [`problem`]).
fn shaped<'de, T: Deserialize<'de>>(
    value: impl de::Deserializer<'de, Error = serde_json::Error>,
) -> Result<T, ShapeError> {
    serde_path_to_error::deserialize(value)
}

/// The parts of an object read straight into the model as they came, by its kind.
struct Parts {
    spec: Option<SliceSpec>,
    status: Option<ClaimStatus>,
}

/// The kind and apiVersion a List gives items that carry none (an API server's typed list).
#[derive(Clone, Copy, Default)]
struct Inherit<'a> {
    kind: Option<&'a str>,
    api_version: Option<&'a str>,
}

/// `metadata` of a List, or of a ResourceSlice: the paging token and the name.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Head {
    name: Option<String>,
    namespace: Option<String>,
    /// A List's paging token (`metadata.continue`).
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

/// A List's item kind: `ResourceSliceList` → `ResourceSlice`.
pub(crate) fn list_item_kind(list_kind: Option<&str>) -> Option<&str> {
    list_kind
        .and_then(|k| k.strip_suffix("List"))
        .filter(|k| !k.is_empty())
}

/// What reading one object came to.
enum Outcome {
    /// An object, kept or passed over by its kind.
    Object,
    /// A List, with its continue token.
    List(Option<String>),
    /// An object with no kind, in a List whose kind was not known yet (kubectl writes `items`
    /// before `kind`): read again once it is.
    Kindless(serde_json::Map<String, serde_json::Value>),
}

/// Reads one object or List into `objects`, routing by kind as fields arrive. A ResourceSlice's
/// spec is read straight into the model when its kind and version come first (an API server's
/// and kubectl's order); otherwise its fields are kept as JSON values and read once the kind is
/// known.
struct ObjectSeed<'o, 'i> {
    objects: &'o mut Objects,
    inherit: Inherit<'i>,
}

/// What a field is read as, by what is known of the object's kind when it arrives.
enum Read {
    Slice,
    /// A ResourceClaim of which only the allocation is wanted.
    Claim,
    /// A kind we read, in a version we do not: only its name is kept, for the note.
    Named,
    Typed,
    Skip,
    Unknown,
}

impl ObjectSeed<'_, '_> {
    fn read_as(&self, kind: Option<&str>, api_version: Option<&str>) -> Read {
        let kind = kind.or(self.inherit.kind);
        let api_version = api_version.or(self.inherit.api_version);
        let Some(kind) = kind else {
            return Read::Unknown;
        };
        let Some(known) = Kind::from_name(kind) else {
            return if kind.ends_with("List") {
                Read::Unknown
            } else {
                Read::Skip
            };
        };
        if !self.objects.wanted.contains(known) {
            return Read::Skip;
        }
        match api_version {
            None => Read::Unknown,
            // Noted by `route` without reading the rest.
            Some(v) if v != known.api_version() => Read::Named,
            Some(_) if known == Kind::ResourceSlice => Read::Slice,
            Some(_) if known == Kind::ResourceClaim && self.objects.wanted.allocations_only => {
                Read::Claim
            }
            Some(_) => Read::Typed,
        }
    }
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = Outcome;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Outcome, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = Outcome;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object or List")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Outcome, A::Error> {
        // Borrowed: every item of a List names both.
        let mut api_version: Option<Key<'de>> = None;
        let mut kind: Option<Key<'de>> = None;
        let mut head: Option<Head> = None;
        let mut spec: Option<SliceSpec> = None;
        let mut status: Option<ClaimStatus> = None;
        let mut fields = serde_json::Map::new();
        let mut list = false;
        let mut kindless: Vec<serde_json::Map<String, serde_json::Value>> = Vec::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_ref() {
                "apiVersion" => api_version = map.next_value()?,
                "kind" => kind = map.next_value()?,
                "items" => {
                    list = true;
                    let inherit = Inherit {
                        kind: list_item_kind(kind.as_deref()).or(self.inherit.kind),
                        api_version: api_version.as_deref().or(self.inherit.api_version),
                    };
                    kindless = map.next_value_seed(ItemsSeed {
                        objects: &mut *self.objects,
                        inherit,
                    })?;
                }
                other => match (other, self.read_as(kind.as_deref(), api_version.as_deref())) {
                    ("metadata", Read::Slice | Read::Named | Read::Claim) => {
                        head = Some(map.next_value()?)
                    }
                    ("spec", Read::Slice) => spec = Some(map.next_value()?),
                    ("status", Read::Claim) => status = Some(map.next_value()?),
                    ("metadata", _) if kind.as_deref().is_some_and(|k| k.ends_with("List")) => {
                        head = Some(map.next_value()?)
                    }
                    (_, Read::Slice | Read::Named | Read::Claim | Read::Skip) => {
                        map.next_value::<IgnoredAny>()?;
                    }
                    (_, Read::Typed | Read::Unknown) => {
                        fields.insert(other.to_string(), map.next_value()?);
                    }
                },
            }
        }
        if list {
            let inherit = Inherit {
                kind: list_item_kind(kind.as_deref()).or(self.inherit.kind),
                api_version: api_version.as_deref().or(self.inherit.api_version),
            };
            for item in kindless {
                self.objects
                    .add_value_with(&serde_json::Value::Object(item), inherit);
            }
            let token = head
                .and_then(|h| h.continue_token)
                .or_else(|| {
                    fields
                        .get("metadata")
                        .and_then(|m| m.get("continue"))
                        .and_then(|c| c.as_str())
                        .map(str::to_owned)
                })
                .filter(|t| !t.is_empty());
            return Ok(Outcome::List(token));
        }
        let kind = kind.as_deref().or(self.inherit.kind);
        let api_version = api_version.as_deref().or(self.inherit.api_version);
        // No kind, own or inherited: not an object anyone can route (a List's items may learn
        // theirs from a `kind` that comes after them).
        if kind.is_none() {
            return Ok(Outcome::Kindless(fields));
        }
        self.objects
            .route(kind, api_version, head, Parts { spec, status }, fields)
            .map_err(de::Error::custom)?;
        Ok(Outcome::Object)
    }
}

/// A List's items, each read by [`ObjectSeed`]; those that carry no kind while the List's kind
/// is not known yet are handed back, to be read at the end of the List.
struct ItemsSeed<'o, 'i> {
    objects: &'o mut Objects,
    inherit: Inherit<'i>,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_, '_> {
    type Value = Vec<serde_json::Map<String, serde_json::Value>>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_, '_> {
    type Value = Vec<serde_json::Map<String, serde_json::Value>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut kindless = Vec::new();
        let max = self.objects.max_items.unwrap_or(usize::MAX);
        let mut items = 0usize;
        while let Some(outcome) = seq.next_element_seed(ObjectSeed {
            objects: &mut *self.objects,
            inherit: self.inherit,
        })? {
            items += 1;
            if items > max {
                return Err(de::Error::custom(format_args!(
                    "{OVER_LIMIT} {max} items in one page, the limit asked for"
                )));
            }
            if let Outcome::Kindless(fields) = outcome {
                kindless.push(fields);
            }
        }
        Ok(kindless)
    }
}

/// An object of a known kind that does not have its kind's shape; the one-pass read fails with
/// it, and the forgiving read turns it into a note.
#[derive(Debug)]
struct Unreadable(String);

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Objects {
    /// An empty set that keeps only these kinds; objects of the others are skipped unparsed.
    pub(crate) fn wanting(kinds: Kinds) -> Objects {
        Objects {
            wanted: kinds,
            ..Objects::default()
        }
    }

    /// An empty set for one page of a listing asked with `limit`: a List of more items is
    /// refused as it is read.
    pub(crate) fn page(kinds: Kinds, limit: usize) -> Objects {
        Objects {
            max_items: Some(limit),
            ..Objects::wanting(kinds)
        }
    }

    /// An empty set read as this one is (the same kinds and bound).
    fn fresh(&self) -> Objects {
        Objects {
            max_items: self.max_items,
            ..Objects::wanting(self.wanted)
        }
    }

    /// The kinds kept.
    pub(crate) fn wanted(&self) -> Kinds {
        self.wanted
    }

    /// Turns the count of objects without a name into one note naming `source`, if any were.
    pub(crate) fn note_nameless(&mut self, source: &str) {
        let n = std::mem::take(&mut self.nameless);
        if n > 0 {
            let objects = if n == 1 { "object" } else { "objects" };
            self.notes.push(format!(
                "{source}: skipped {n} {objects} without metadata.name, which no API server stores"
            ));
        }
    }

    /// The keys of the objects kept, in the order read, for checking a listing's order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = crate::paging::Key<'_>> {
        use crate::paging::Key;
        fn meta(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key<'_> {
            Key {
                namespace: m.namespace.as_deref().unwrap_or_default(),
                name: m.name.as_deref().unwrap_or_default(),
            }
        }
        fn cluster(name: &str) -> Key<'_> {
            Key {
                namespace: "",
                name,
            }
        }
        let slices = self.slices.iter().map(|s| cluster(&s.metadata.name));
        let allocated = self.allocated.iter().map(|c| Key {
            namespace: &c.namespace,
            name: &c.name,
        });
        let rules = self.taint_rules.iter().map(|r| cluster(&r.metadata.name));
        slices
            .chain(allocated)
            .chain(rules)
            .chain(self.classes.iter().map(|o| meta(&o.metadata)))
            .chain(self.claims.iter().map(|o| meta(&o.metadata)))
            .chain(self.claim_templates.iter().map(|o| meta(&o.metadata)))
            .chain(self.pods.iter().map(|o| meta(&o.metadata)))
            .chain(self.nodes.iter().map(|o| meta(&o.metadata)))
            .chain(self.events.iter().map(|o| meta(&o.metadata)))
    }

    /// Adds the objects of one JSON document: a single object, or a List (including the
    /// `ResourceSliceList` an API server returns). Returns the List's `metadata.continue` token
    /// when there is one, for paging through a cluster.
    ///
    /// The document is read in one pass; one where an object does not have its kind's shape is
    /// read again object by object, so that the odd object costs a note, not the listing.
    pub(crate) fn add_json(&mut self, text: &str) -> Result<Option<String>, serde_json::Error> {
        Ok(match self.read_json(text)? {
            Outcome::List(token) => token,
            Outcome::Object | Outcome::Kindless(_) => None,
        })
    }

    /// Adds the objects of one JSON document, saying whether it was a Kubernetes object or List
    /// at all (`false`: an object with neither `kind` nor `apiVersion` nor `items`).
    pub(crate) fn add_json_document(&mut self, text: &str) -> Result<bool, serde_json::Error> {
        Ok(!matches!(self.read_json(text)?, Outcome::Kindless(_)))
    }

    fn read_json(&mut self, text: &str) -> Result<Outcome, serde_json::Error> {
        let mut attempt = self.fresh();
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let read = ObjectSeed {
            objects: &mut attempt,
            inherit: Inherit::default(),
        }
        .deserialize(&mut deserializer)
        .and_then(|outcome| deserializer.end().map(|()| outcome));
        match read {
            Ok(outcome) => {
                self.extend(attempt);
                Ok(outcome)
            }
            // A page over its limit is refused whole, not read again item by item.
            Err(e) if e.is_data() && !e.to_string().starts_with(OVER_LIMIT) => {
                self.add_json_by_object(text).map(Outcome::List)
            }
            Err(e) => Err(e),
        }
    }

    /// Adds one item of a List read apart from its List (files are read item by item, so that
    /// a fleet is never held whole), given the List's `kind` and `apiVersion` as far as they are
    /// known. An item with no kind of its own while the List's is not known yet is handed back,
    /// for [`Objects::add_late_item`] once it is.
    pub(crate) fn add_list_item(
        &mut self,
        text: &str,
        list_kind: Option<&str>,
        list_api_version: Option<&str>,
    ) -> Result<Option<serde_json::Map<String, serde_json::Value>>, serde_json::Error> {
        let inherit = Inherit {
            kind: list_item_kind(list_kind),
            api_version: list_api_version,
        };
        self.add_item_text(text, inherit)
    }

    /// An item [`Objects::add_list_item`] handed back, read again now that the List's kind is
    /// known; `false` when it still has none.
    pub(crate) fn add_late_item(
        &mut self,
        text: &str,
        list_kind: Option<&str>,
        list_api_version: Option<&str>,
    ) -> Result<bool, serde_json::Error> {
        self.add_list_item(text, list_kind, list_api_version)
            .map(|kindless| kindless.is_none())
    }

    /// The slow, forgiving path of [`Objects::add_json`]: each item of a List read on its own.
    fn add_json_by_object(&mut self, text: &str) -> Result<Option<String>, serde_json::Error> {
        #[derive(Deserialize)]
        struct ListHead<'a> {
            #[serde(default, rename = "apiVersion")]
            api_version: Option<String>,
            #[serde(default)]
            kind: Option<String>,
            #[serde(default, borrow)]
            items: Option<Vec<&'a RawValue>>,
            #[serde(default)]
            metadata: Option<Head>,
        }
        // The items are gathered below: a page is counted first, so that a page of millions
        // of items costs a parse, not a vector of them.
        if let Some(max) = self.max_items {
            let items = count_items(text)?;
            if items > max {
                return Err(de::Error::custom(format_args!(
                    "{OVER_LIMIT} {max} items in one page, the limit asked for"
                )));
            }
        }
        let head: ListHead = serde_json::from_str(text)?;
        let token = head
            .metadata
            .as_ref()
            .and_then(|m| m.continue_token.clone())
            .filter(|t| !t.is_empty());
        let inherit = Inherit {
            kind: list_item_kind(head.kind.as_deref()),
            api_version: head.api_version.as_deref(),
        };
        match head.items {
            Some(items) => {
                for item in items {
                    self.add_item_text(item.get(), inherit)?;
                }
            }
            None => {
                self.add_item_text(text, Inherit::default())?;
            }
        }
        Ok(token)
    }

    /// Reads one object on its own; when it does not have its kind's shape, notes it. An
    /// object with no kind, when none is inherited, is handed back.
    fn add_item_text(
        &mut self,
        text: &str,
        inherit: Inherit<'_>,
    ) -> Result<Option<serde_json::Map<String, serde_json::Value>>, serde_json::Error> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let mut attempt = self.fresh();
        let read = ObjectSeed {
            objects: &mut attempt,
            inherit,
        }
        .deserialize(&mut deserializer)
        .and_then(|outcome| deserializer.end().map(|()| outcome));
        match read {
            Ok(Outcome::Kindless(fields)) => return Ok(Some(fields)),
            Ok(_) => self.extend(attempt),
            Err(e) if e.is_data() => {
                let value: serde_json::Value = serde_json::from_str(text)?;
                self.note_unreadable(&value, inherit, &e.to_string());
            }
            Err(e) => return Err(e),
        }
        Ok(None)
    }

    fn note_unreadable(&mut self, value: &serde_json::Value, inherit: Inherit<'_>, error: &str) {
        let kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .or(inherit.kind)
            .unwrap_or("object");
        // A ResourceSlice read in one pass says where in the text, not which field: read
        // again, apart, to name the field.
        let known = Kind::from_name(kind).filter(|k| self.wanted.contains(*k));
        let problem = match known {
            Some(Kind::ResourceSlice) => slice_problem(value),
            _ => None,
        }
        .unwrap_or_else(|| crate::text::elide(error, MAX_PROBLEM_SHOWN).into_owned());
        match known {
            Some(known) => {
                self.add_unparsed(
                    known,
                    metadata_str(value, "namespace"),
                    metadata_str(value, "name"),
                    problem,
                );
            }
            None => {
                let name = object_name(value.get("metadata"));
                let name = crate::text::elide(&name, MAX_NAME_SHOWN);
                let kind = crate::text::elide(kind, MAX_NAME_SHOWN);
                self.notes
                    .push(format!("skipped {kind} {name:?}: {problem}"));
            }
        }
    }

    /// Keeps an object that did not have its kind's shape, and notes it.
    fn add_unparsed(&mut self, kind: Kind, namespace: String, name: String, problem: String) {
        let shown = qualified_name(Some(&namespace), Some(&name));
        self.notes.push(format!(
            "skipped {} {:?}: {problem}",
            kind.name(),
            crate::text::elide(&shown, MAX_NAME_SHOWN)
        ));
        self.unparsed.push(Unparsed {
            kind,
            namespace,
            name,
            problem,
        });
    }

    /// Appends another set of objects (a later page of the same listing, another file).
    pub(crate) fn extend(&mut self, other: Objects) {
        self.slices.extend(other.slices);
        self.classes.extend(other.classes);
        self.claims.extend(other.claims);
        self.allocated.extend(other.allocated);
        self.claim_templates.extend(other.claim_templates);
        self.pods.extend(other.pods);
        self.nodes.extend(other.nodes);
        self.events.extend(other.events);
        self.taint_rules.extend(other.taint_rules);
        self.notes.extend(other.notes);
        self.unparsed.extend(other.unparsed);
        self.nameless += other.nameless;
    }

    /// Adds the objects of one already-parsed document (the YAML path).
    pub(crate) fn add_value(&mut self, value: &serde_json::Value) {
        self.add_value_with(value, Inherit::default());
    }

    fn add_value_with(&mut self, value: &serde_json::Value, inherit: Inherit<'_>) {
        let mut attempt = self.fresh();
        let read = ObjectSeed {
            objects: &mut attempt,
            inherit,
        }
        .deserialize(value);
        match read {
            Ok(_) => self.extend(attempt),
            Err(e) => match value.get("items").and_then(|i| i.as_array()) {
                Some(items) => {
                    let text = |f: &str| value.get(f).and_then(|v| v.as_str());
                    let inherit = Inherit {
                        kind: list_item_kind(text("kind")).or(inherit.kind),
                        api_version: text("apiVersion").or(inherit.api_version),
                    };
                    for item in items {
                        self.add_value_with(item, inherit);
                    }
                }
                None => self.note_unreadable(value, inherit, &e.to_string()),
            },
        }
    }

    /// Keeps one object read by [`ObjectSeed`], by its kind.
    fn route(
        &mut self,
        kind: Option<&str>,
        api_version: Option<&str>,
        head: Option<Head>,
        Parts { spec, status }: Parts,
        mut fields: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), Unreadable> {
        let Some(known) = kind.and_then(Kind::from_name) else {
            // Other kinds (Deployments, ConfigMaps...) may share a file: not ours to read.
            return Ok(());
        };
        if !self.wanted.contains(known) {
            return Ok(());
        }
        // Before anything is kept or noted: a million `{}` in a typed List cost a count.
        let named = match &head {
            Some(h) => h.name.as_deref(),
            None => fields
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(|n| n.as_str()),
        }
        .is_some_and(|n| !n.is_empty());
        if !named {
            self.nameless += 1;
            return Ok(());
        }
        let name = match &head {
            Some(h) => qualified_name(h.namespace.as_deref(), h.name.as_deref()),
            None => object_name(fields.get("metadata")),
        };
        let name = crate::text::elide(&name, MAX_NAME_SHOWN).into_owned();
        if api_version != Some(known.api_version()) {
            let hint = if known.group().is_empty() {
                format!("kubectl get {} -o yaml", known.plural())
            } else {
                format!(
                    "kubectl get {}.v1.{} -o yaml",
                    known.plural(),
                    known.group()
                )
            };
            let read = match api_version {
                Some(version) => format!("it is {}", crate::text::elide(version, MAX_NAME_SHOWN)),
                None => "it has no apiVersion".to_string(),
            };
            self.notes.push(format!(
                "skipped {} {name:?}: {read}, and only {} is read (hint: {hint})",
                known.name(),
                known.api_version(),
            ));
            return Ok(());
        }
        let unreadable = |e: serde_json::Error| Unreadable(e.to_string());
        if known == Kind::ResourceSlice {
            // Fields that came before the kind was known were kept as values.
            let metadata = match (head, fields.remove("metadata")) {
                (Some(head), _) => Metadata {
                    name: head.name.unwrap_or_default(),
                },
                (None, Some(value)) => serde_json::from_value(value).map_err(unreadable)?,
                (None, None) => Metadata::default(),
            };
            let spec = match (spec, fields.remove("spec")) {
                (Some(spec), _) => spec,
                (None, Some(value)) => serde_json::from_value(value).map_err(unreadable)?,
                (None, None) => SliceSpec::default(),
            };
            self.slices.push(ResourceSlice { metadata, spec });
            return Ok(());
        }
        if known == Kind::ResourceClaim && self.wanted.allocations_only {
            let head = match (head, fields.remove("metadata")) {
                (Some(head), _) => head,
                (None, Some(value)) => serde_json::from_value(value).map_err(unreadable)?,
                (None, None) => Head::default(),
            };
            let status = match (status, fields.remove("status")) {
                (Some(status), _) => status,
                (None, Some(value)) => serde_json::from_value(value).map_err(unreadable)?,
                (None, None) => ClaimStatus::default(),
            };
            self.allocated.push(AllocatedClaim::new(
                head.namespace.unwrap_or_default(),
                head.name.unwrap_or_default(),
                status,
            ));
            return Ok(());
        }
        // k8s-openapi checks kind and apiVersion; items of a typed List carry neither.
        fields.insert("kind".into(), known.name().into());
        fields.insert("apiVersion".into(), known.api_version().into());
        let value = serde_json::Value::Object(fields);
        let (namespace, name) = (
            metadata_str(&value, "namespace"),
            metadata_str(&value, "name"),
        );
        let mut typed = || -> Result<(), ShapeError> {
            match known {
                Kind::DeviceClass => self.classes.push(shaped(&value)?),
                Kind::ResourceClaim => self.claims.push(shaped(&value)?),
                Kind::ResourceClaimTemplate => self.claim_templates.push(shaped(&value)?),
                Kind::Pod => self.pods.push(shaped(&value)?),
                Kind::Node => self.nodes.push(shaped(&value)?),
                Kind::Event => self.events.push(shaped(&value)?),
                Kind::DeviceTaintRule => self.taint_rules.push(shaped(&value)?),
                Kind::ResourceSlice => unreachable!("read above"),
            }
            Ok(())
        };
        if let Err(e) = typed() {
            self.add_unparsed(known, namespace, name, problem(&e));
        }
        Ok(())
    }
}

/// How many items a List's text holds, none of them kept.
fn count_items(text: &str) -> Result<usize, serde_json::Error> {
    struct Count(usize);
    impl<'de> Deserialize<'de> for Count {
        fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Counter;
            impl<'de> Visitor<'de> for Counter {
                type Value = Count;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a list")
                }
                fn visit_unit<E>(self) -> Result<Count, E> {
                    Ok(Count(0))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                    let mut n = 0;
                    while seq.next_element::<IgnoredAny>()?.is_some() {
                        n += 1;
                    }
                    Ok(Count(n))
                }
            }
            deserializer.deserialize_any(Counter)
        }
    }
    #[derive(Deserialize)]
    struct Items {
        #[serde(default)]
        items: Option<Count>,
    }
    Ok(serde_json::from_str::<Items>(text)?
        .items
        .map_or(0, |c| c.0))
}

/// `namespace/name`, or `name` for cluster-scoped objects.
fn qualified_name(namespace: Option<&str>, name: Option<&str>) -> String {
    match (namespace, name.unwrap_or_default()) {
        (Some(ns), name) if !ns.is_empty() => format!("{ns}/{name}"),
        (_, name) => name.to_string(),
    }
}

/// What is wrong with a ResourceSlice's `metadata` or `spec`, and where, if either is.
fn slice_problem(value: &serde_json::Value) -> Option<String> {
    let part = |field: &str, read: &dyn Fn(&serde_json::Value) -> Result<(), ShapeError>| {
        let part = value.get(field)?;
        read(part).err().map(|e| format!("{field}.{}", problem(&e)))
    };
    part("metadata", &|v| shaped::<Metadata>(v).map(drop))
        .or_else(|| part("spec", &|v| shaped::<SliceSpec>(v).map(drop)))
}

fn object_name(metadata: Option<&serde_json::Value>) -> String {
    let field = |f: &str| metadata.and_then(|m| m.get(f)).and_then(|v| v.as_str());
    qualified_name(field("namespace"), field("name"))
}

/// A List's `metadata.continue` token. The API server writes `metadata` before `items` (Go's
/// field order), so reading stops at `metadata` instead of skipping megabytes of items: the
/// next page is asked for that much sooner. A list that puts `items` first is still read whole.
pub(crate) fn continue_token(text: &str) -> Result<Option<String>, serde_json::Error> {
    /// Carries the token out of the visitor, which stops the parse early by failing on purpose.
    struct Early<'a>(&'a mut Option<Option<String>>);

    impl<'de> Visitor<'de> for Early<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a List")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Key<'de>>()? {
                if key == "metadata" {
                    let metadata: Option<Head> = map.next_value()?;
                    *self.0 = Some(metadata.and_then(|m| m.continue_token));
                    return Err(de::Error::custom(STOPPED));
                }
                map.next_value::<IgnoredAny>()?;
            }
            *self.0 = Some(None);
            Ok(())
        }
    }

    const STOPPED: &str = "stopped after metadata";
    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    match de::Deserializer::deserialize_map(&mut deserializer, Early(&mut found)) {
        Err(e) if found.is_none() || !e.to_string().starts_with(STOPPED) => Err(e),
        _ => Ok(found.flatten().filter(|t| !t.is_empty())),
    }
}

/// `metadata.<field>` of an object that may not have its kind's shape, "" where it is not a
/// string.
fn metadata_str(value: &serde_json::Value, field: &str) -> String {
    value
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned()
}
