//! `kubectl media class`: turns capability flags into the DeviceClass and ResourceClaimTemplate
//! YAML of the product document (steps 2–4). Local only; it needs no cluster.
//!
//! Every flag is checked before anything is printed: [`ClassArgs::plan`] either returns the
//! objects to print or one usage error naming the problem and the fix.

use clap::Args;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use serde::Serialize;

use crate::catalogue::UnknownCapability;
use crate::classes::{self, CapabilitySet, Statement};
use crate::cli::output::{self, ObjectFormat};
use crate::cli::{CapabilityFlags, Error, Global, Io};
use crate::ffprobe::Played;
use crate::names::{self, NameRule};
use crate::render_drivers::{self, RenderDriver, UnknownRenderDriver};

/// Every line fits 70 columns, as `why`'s examples do (clap wraps longer ones at the terminal's
/// width, man at 80 columns less its indent, and a wrapped command breaks when copied); a long
/// command continues on the next line after a `\\`.
const EXAMPLES: &str = "\
Examples:
  # The product document's decode-10bit class: GPUs that decode
  # 10-bit HEVC and scale 10-bit frames on the video processor
  kubectl media class decode-10bit --decode HEVCMain10 --scale 10bit

  # ... with the claim template that pairs it with the render node of
  # the same GPU, and the gpu-render class of the liken render nodes
  kubectl media class decode-10bit --decode HEVCMain10 --scale 10bit \\
    --claim --with-render-class

  # The same beside Intel's GPU driver instead of liken: its class
  # of whole GPUs (never a VF or a GPU bound to vfio-pci)
  kubectl media class decode-10bit --decode HEVCMain10 --scale 10bit \\
    --claim --with-render-class --render-driver gpu.intel.com

  # A request that narrows the catch-all media-gpu class instead of a
  # new class: a GPU that decodes VP9 and scales 8-bit frames
  kubectl media class --selector --decode VP9 --scale 8bit \\
    --with-base-class

  # Flags repeat and take comma lists; values ignore case and prefix
  kubectl media class transcode --decode hevcmain,hevcmain10 \\
    --encode H264LowPower

  # Apply straight away
  kubectl media class decode-10bit --decode HEVCMain10 --scale 10bit \\
    --claim | kubectl apply -f -";

/// Writes a DeviceClass that selects the GPUs whose driver states every requested capability,
/// and optionally the claim template that pairs it with a render node on the same GPU.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXAMPLES)]
pub struct ClassArgs {
    /// Name of the DeviceClass (of the template with --selector); derived from the capabilities
    /// when omitted.
    pub name: Option<String>,

    #[command(flatten)]
    pub capabilities: CapabilityFlags,

    /// Also print the ResourceClaimTemplate that claims the render node and this class's device
    /// on one GPU; named TEMPLATE, or after the class. Write --claim=TEMPLATE before NAME.
    #[arg(long, value_name = "TEMPLATE", num_args = 0..=1, require_equals = false)]
    pub claim: Option<Option<String>>,

    /// The DRA driver whose render nodes the template claims: liken.sh, gpu.intel.com,
    /// gpu.nvidia.com or gpu.amd.com [default: liken.sh].
    #[arg(long, value_name = "DRIVER", add = crate::cli::complete::RenderDriverCompleter::arg())]
    pub render_driver: Option<String>,

    /// The class of the render nodes the template claims [default: the render driver's,
    /// gpu-render for liken].
    #[arg(long, value_name = "CLASS")]
    pub render_class: Option<String>,

    /// Also print the render-node class of the render driver's whole GPUs (skip it when you
    /// have one, e.g. display-render).
    #[arg(long)]
    pub with_render_class: bool,

    /// Print no class: the template's request narrows the base class with CEL selectors.
    #[arg(long)]
    pub selector: bool,

    /// A device taint the template's requests tolerate, as kubectl writes taints:
    /// KEY[=VALUE][:EFFECT] (without VALUE any value, without EFFECT every effect); repeat for
    /// several. E.g. gpu.nvidia.com/xid for a workload that accepts a GPU its render driver
    /// tainted (a GPU whose probe failed states no capability, so no capability class takes it).
    #[arg(long, value_name = "TAINT")]
    pub tolerate: Vec<String>,

    /// The class of every media.liken.sh device that --selector narrows [default: media-gpu].
    #[arg(long, value_name = "CLASS")]
    pub base_class: Option<String>,

    /// Also print the base class (device.driver == "media.liken.sh").
    #[arg(long)]
    pub with_base_class: bool,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = ObjectFormat::Yaml)]
    pub output: ObjectFormat,
}

/// What `class` prints, in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
// A run prints at most four objects; boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Object {
    Class(DeviceClass),
    Template(ResourceClaimTemplate),
}

impl Object {
    fn kind_and_name(&self) -> (&'static str, &str) {
        match self {
            Object::Class(c) => (
                "DeviceClass",
                c.metadata.name.as_deref().unwrap_or_default(),
            ),
            Object::Template(t) => (
                "ResourceClaimTemplate",
                t.metadata.name.as_deref().unwrap_or_default(),
            ),
        }
    }
}

/// A `class` invocation that cannot be carried out as written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClassError {
    #[error("{0}")]
    UnknownCapability(#[from] UnknownCapability),
    #[error("--render-driver: {0}")]
    UnknownRenderDriver(#[from] UnknownRenderDriver),
    #[error("--tolerate {0}")]
    Toleration(#[from] crate::tolerations::TolerationError),
    #[error(
        "no capability requested (hint: name at least one with --decode, --encode or --scale, \
         e.g. --decode HEVCMain10 --scale 10bit, or a media file with --for FILE)"
    )]
    NoCapability,
    #[error("invalid {what} {name:?}: {rule} (hint: {hint})")]
    InvalidName {
        what: &'static str,
        name: String,
        rule: NameRule,
        hint: &'static str,
    },
    #[error("{flag} only applies with {needs} (hint: {hint})")]
    Unused {
        flag: &'static str,
        needs: &'static str,
        hint: &'static str,
    },
    #[error(
        "{flag} {name:?} is the media-capabilities agent's own class, installed as wiring and not \
         for workloads (hint: {hint})"
    )]
    AgentClass {
        flag: &'static str,
        name: String,
        hint: &'static str,
    },
    #[error("{0}")]
    Conflict(String),
}

/// Runs `class`: plans the objects and prints them; nothing is read from a cluster.
pub(crate) fn run(args: &ClassArgs, global: &Global, io: &mut Io<'_>) -> Result<(), Error> {
    // Flags first, so that a typo is told before ffprobe runs.
    args.capabilities.parse().map_err(ClassError::from)?;
    args.check_unused_flags()?;
    let played = args.capabilities.played()?;
    crate::cli::warn_played(io, global, &played);
    let objects = args.plan(&played)?;
    let text = output::render_objects(&objects, args.output)?;
    output::write_all(io.stdout, &text)?;
    Ok(())
}

impl ClassArgs {
    /// Checks every flag and returns the objects to print; `played` is what the `--for` files
    /// need beside the flags.
    pub(crate) fn plan(&self, played: &[Played]) -> Result<Vec<Object>, ClassError> {
        let capabilities = self.capabilities(played)?;
        self.check_unused_flags()?;

        let driver = self.render_driver()?;
        let render_class = self.render_class.as_deref().unwrap_or(driver.render_class);
        let base_class = self
            .base_class
            .as_deref()
            .unwrap_or(classes::DEFAULT_BASE_CLASS);
        check_name(
            "render class",
            render_class,
            "--render-class takes a DeviceClass name",
        )?;
        check_name(
            "base class",
            base_class,
            "--base-class takes a DeviceClass name",
        )?;
        self.check_agent_class(render_class, base_class)?;
        let tolerations = crate::tolerations::parse_all(&self.tolerate)?;
        let template_flag = self.claim.as_ref().and_then(Option::as_deref);
        if let Some(template) = template_flag {
            check_name(
                "template name",
                template,
                "use lowercase letters, digits and '-', e.g. --claim=decode-10bit",
            )?;
        }
        if let Some(name) = &self.name {
            let what = if self.selector {
                "template name"
            } else {
                "class name"
            };
            check_name(
                what,
                name,
                "use lowercase letters, digits and '-', e.g. decode-10bit",
            )?;
        }

        let mut objects = Vec::new();
        let request = capabilities.request_name();
        if self.selector {
            if let (Some(name), Some(template)) = (&self.name, template_flag)
                && name != template
            {
                return Err(ClassError::Conflict(format!(
                    "--selector writes no class, so NAME {name:?} and --claim={template} both \
                     name the template (hint: give only one of them)"
                )));
            }
            let name = template_flag
                .map(str::to_owned)
                .or_else(|| self.name.clone())
                .unwrap_or_else(|| capabilities.derived_name());
            if self.with_render_class {
                objects.push(Object::Class(classes::render_class(render_class, driver)));
            }
            if self.with_base_class {
                objects.push(Object::Class(classes::base_class(base_class)));
            }
            let statement = Statement::Selectors {
                base_class,
                capabilities: &capabilities,
            };
            objects.push(Object::Template(classes::claim_template(
                &name,
                render_class,
                request,
                &statement,
                &tolerations,
            )));
        } else {
            let class = self
                .name
                .clone()
                .unwrap_or_else(|| capabilities.derived_name());
            objects.push(Object::Class(classes::capability_class(
                &class,
                &capabilities,
            )));
            if self.with_render_class {
                objects.push(Object::Class(classes::render_class(render_class, driver)));
            }
            if let Some(template) = &self.claim {
                let name = template.clone().unwrap_or_else(|| class.clone());
                let statement = Statement::Class(&class);
                objects.push(Object::Template(classes::claim_template(
                    &name,
                    render_class,
                    request,
                    &statement,
                    &tolerations,
                )));
            }
        }
        check_distinct(&objects)?;
        Ok(objects)
    }

    /// `media-render` selects every render node for the agent's own claim; a workload claiming
    /// through it, or a class printed under its name (which `kubectl apply` would put over the
    /// installed one), would take the agent's wiring for its own.
    fn check_agent_class(&self, render_class: &str, base_class: &str) -> Result<(), ClassError> {
        let agent = |name: &str| name == classes::AGENT_CLASS;
        if !self.selector && self.name.as_deref().is_some_and(agent) {
            return Err(ClassError::AgentClass {
                flag: "NAME",
                name: classes::AGENT_CLASS.to_owned(),
                hint: "choose another NAME, e.g. decode-10bit",
            });
        }
        if agent(render_class) {
            return Err(ClassError::AgentClass {
                flag: "--render-class",
                name: classes::AGENT_CLASS.to_owned(),
                hint: "claim render nodes through gpu-render (the default, --with-render-class \
                       writes it) or a class of your own",
            });
        }
        if agent(base_class) {
            return Err(ClassError::AgentClass {
                flag: "--base-class",
                name: classes::AGENT_CLASS.to_owned(),
                hint: "narrow media-gpu (the default, --with-base-class writes it) or a class of \
                       your own that selects media.liken.sh devices",
            });
        }
        Ok(())
    }

    fn render_driver(&self) -> Result<&'static RenderDriver, ClassError> {
        match &self.render_driver {
            Some(name) => Ok(RenderDriver::parse(name)?),
            None => Ok(&render_drivers::DEFAULT),
        }
    }

    fn capabilities(&self, played: &[Played]) -> Result<CapabilitySet, ClassError> {
        let parsed = self.capabilities.with_played(played)?;
        CapabilitySet::new(parsed).ok_or(ClassError::NoCapability)
    }

    /// Flags that would silently do nothing are refused: the user meant something by them.
    fn check_unused_flags(&self) -> Result<(), ClassError> {
        if !self.selector {
            if self.base_class.is_some() {
                return Err(ClassError::Unused {
                    flag: "--base-class",
                    needs: "--selector",
                    hint: "add --selector to narrow that class, or drop --base-class",
                });
            }
            if self.with_base_class {
                return Err(ClassError::Unused {
                    flag: "--with-base-class",
                    needs: "--selector",
                    hint: "add --selector, or drop --with-base-class",
                });
            }
        }
        let claims = self.selector || self.claim.is_some();
        if !self.tolerate.is_empty() && !claims {
            return Err(ClassError::Unused {
                flag: "--tolerate",
                needs: "--claim or --selector",
                hint: "add --claim to write the template whose requests tolerate the taint; a DeviceClass holds no tolerations",
            });
        }
        crate::tolerations::parse_all(&self.tolerate)?;
        if self.render_driver.is_some() && !claims && !self.with_render_class {
            return Err(ClassError::Unused {
                flag: "--render-driver",
                needs: "--claim, --selector or --with-render-class",
                hint: "add --claim to write the template that claims its render nodes",
            });
        }
        if self.render_class.is_some() && !claims && !self.with_render_class {
            return Err(ClassError::Unused {
                flag: "--render-class",
                needs: "--claim, --selector or --with-render-class",
                hint: "add --claim to write the template that uses it",
            });
        }
        Ok(())
    }
}

fn check_name(what: &'static str, name: &str, hint: &'static str) -> Result<(), ClassError> {
    names::check_subdomain(name).map_err(|rule| ClassError::InvalidName {
        what,
        name: name.to_string(),
        rule,
        hint,
    })
}

/// Two printed objects of one kind with one name would overwrite each other on apply.
fn check_distinct(objects: &[Object]) -> Result<(), ClassError> {
    for (i, object) in objects.iter().enumerate() {
        let (kind, name) = object.kind_and_name();
        if objects[..i]
            .iter()
            .any(|o| o.kind_and_name() == (kind, name))
        {
            return Err(ClassError::Conflict(format!(
                "two objects of kind {kind} would be named {name:?} (hint: choose a NAME that \
                 differs from --render-class and --base-class)"
            )));
        }
    }
    Ok(())
}
