//! A listing's pages checked as they come, the same way in both programs. kube-apiserver pages
//! a list by key (etcd's `namespace/name` order, which the `continue` token records), hands a
//! new token with every page but the last and never more items than the `limit` asked for
//! (apiserver `storage/etcd3` `GetList`, the watch cache's paginated list). A token handed back
//! unchanged, an object at or before one already read, more items than asked for, and a listing
//! past its bounds are a server (or a proxy, or a bug) that is not paging: each ends the listing
//! with a [`PagingFault`], where client-go's pager would ask again forever.

use std::cmp::Ordering;

/// How far one listing may go: a listing past either bound is refused, not held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub(crate) pages: usize,
    pub(crate) objects: usize,
    /// The `limit` each page is asked with.
    pub(crate) page_limit: usize,
}

/// The most of a repeated object's key an error quotes: a server's name of a megabyte is cut.
const MAX_SHOWN_KEY: usize = 200;

/// Why a listing was stopped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PagingFault {
    #[error(
        "page {page} handed back the continue token it was asked with, so the listing would never end"
    )]
    SameToken { page: usize },
    /// An object at or before one read earlier in the listing: pages repeat what was read.
    #[error(
        "page {page} repeats {:?}, which the listing had already read or passed",
        crate::text::elide(.key, MAX_SHOWN_KEY)
    )]
    Repeated { page: usize, key: String },
    #[error("page {page} holds {items} items, more than the {limit} asked for")]
    PageOverLimit {
        page: usize,
        items: usize,
        limit: usize,
    },
    #[error("the listing went past {bound} pages without an end")]
    TooManyPages { bound: usize },
    #[error("the listing went past {bound} objects without an end")]
    TooManyObjects { bound: usize },
}

/// An object's place in its listing: `namespace/name` (or `name`), compared as etcd compares
/// its keys, byte by byte. `("a", "z")` comes after `("a-b", "c")`, as `a/z` after `a-b/c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
}

impl Key<'_> {
    fn bytes(&self) -> impl Iterator<Item = u8> + '_ {
        let slash: &[u8] = if self.namespace.is_empty() { b"" } else { b"/" };
        self.namespace
            .bytes()
            .chain(slash.iter().copied())
            .chain(self.name.bytes())
    }

    fn owned(&self) -> String {
        if self.namespace.is_empty() {
            self.name.to_owned()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

impl PartialOrd for Key<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.bytes().cmp(other.bytes())
    }
}

/// What one page held, by key: how many objects, its first and last (already checked to come in
/// order within the page). Made where the page is parsed, so a page's own check runs there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PageKeys {
    pub(crate) count: usize,
    first: Option<String>,
    last: Option<String>,
}

impl PageKeys {
    /// The keys of one page's objects in the page's order: each must come after the one before.
    pub(crate) fn of<'a>(keys: impl IntoIterator<Item = Key<'a>>) -> Result<PageKeys, String> {
        let mut count = 0;
        let mut first = None;
        let mut previous: Option<Key<'a>> = None;
        for key in keys {
            if previous.is_some_and(|p| key <= p) {
                return Err(key.owned());
            }
            first.get_or_insert(key);
            previous = Some(key);
            count += 1;
        }
        Ok(PageKeys {
            count,
            first: first.map(|k| k.owned()),
            last: previous.map(|k| k.owned()),
        })
    }
}

/// One listing in progress.
#[derive(Debug)]
pub(crate) struct Paging {
    bounds: Bounds,
    pages: usize,
    objects: usize,
    /// The last key read, to which the next page's first must come after.
    last: Option<String>,
}

impl Paging {
    pub(crate) fn new(bounds: Bounds) -> Paging {
        Paging {
            bounds,
            pages: 0,
            objects: 0,
            last: None,
        }
    }

    /// The pages taken so far.
    pub(crate) fn pages(&self) -> usize {
        self.pages
    }

    /// A page has come, asked for with `sent` (`None`: the first) and naming `next`: whether the
    /// listing may ask for it. Checked before the page is parsed, so the next page is asked for
    /// only when the listing may go on.
    pub(crate) fn token(
        &mut self,
        sent: Option<&str>,
        next: Option<&str>,
    ) -> Result<(), PagingFault> {
        self.pages += 1;
        let page = self.pages;
        if next.is_some() && next == sent {
            return Err(PagingFault::SameToken { page });
        }
        if next.is_some() && self.pages >= self.bounds.pages {
            return Err(PagingFault::TooManyPages {
                bound: self.bounds.pages,
            });
        }
        Ok(())
    }

    /// The objects of page `page` (1-based, in the order the pages came), as parsed.
    pub(crate) fn objects(&mut self, page: usize, keys: PageKeys) -> Result<(), PagingFault> {
        if keys.count > self.bounds.page_limit {
            return Err(PagingFault::PageOverLimit {
                page,
                items: keys.count,
                limit: self.bounds.page_limit,
            });
        }
        self.objects += keys.count;
        if self.objects > self.bounds.objects {
            return Err(PagingFault::TooManyObjects {
                bound: self.bounds.objects,
            });
        }
        if let (Some(last), Some(first)) = (&self.last, &keys.first)
            && first.as_bytes() <= last.as_bytes()
        {
            return Err(PagingFault::Repeated {
                page,
                key: first.clone(),
            });
        }
        if keys.last.is_some() {
            self.last = keys.last;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        pages: 4,
        objects: 5,
        page_limit: 2,
    };

    fn key<'a>(namespace: &'a str, name: &'a str) -> Key<'a> {
        Key { namespace, name }
    }

    fn page(names: &[&'static str]) -> PageKeys {
        PageKeys::of(names.iter().map(|n| key("", n))).unwrap()
    }

    #[test]
    fn a_repeated_key_of_any_length_is_quoted_cut() {
        let fault = PagingFault::Repeated {
            page: 2,
            key: "[".repeat(100_000),
        };
        let said = fault.to_string();
        assert!(said.len() < 400 && said.contains("bytes cut"), "{said}");
    }

    #[test]
    fn keys_compare_as_etcd_compares_them() {
        // `a/z` after `a-b/c`: '/' is above '-'; a tuple comparison would say otherwise.
        assert!(key("a", "z") > key("a-b", "c"));
        assert!(key("", "b") > key("", "a"));
        assert!(key("ns", "a") == key("ns", "a"));
        assert_eq!(
            PageKeys::of([key("a", "x"), key("a", "x")]),
            Err("a/x".to_string())
        );
    }

    #[test]
    fn a_listing_that_pages_as_kube_apiserver_does_ends_well() {
        let mut paging = Paging::new(BOUNDS);
        paging.token(None, Some("t1")).unwrap();
        paging.objects(1, page(&["a", "b"])).unwrap();
        paging.token(Some("t1"), Some("t2")).unwrap();
        paging.objects(2, page(&["c", "d"])).unwrap();
        paging.token(Some("t2"), None).unwrap();
        paging.objects(3, page(&[])).unwrap();
        assert_eq!(paging.pages(), 3);
    }

    #[test]
    fn a_listing_that_does_not_page_is_stopped() {
        let mut paging = Paging::new(BOUNDS);
        paging.token(None, Some("t")).unwrap();
        assert_eq!(
            paging.token(Some("t"), Some("t")),
            Err(PagingFault::SameToken { page: 2 })
        );

        let mut paging = Paging::new(BOUNDS);
        paging.objects(1, page(&["a", "b"])).unwrap();
        assert_eq!(
            paging.objects(2, page(&["b", "c"])),
            Err(PagingFault::Repeated {
                page: 2,
                key: "b".into()
            })
        );
        // An empty page says nothing about order; the next is compared with the last read.
        let mut paging = Paging::new(BOUNDS);
        paging.objects(1, page(&["b"])).unwrap();
        paging.objects(2, page(&[])).unwrap();
        assert!(matches!(
            paging.objects(3, page(&["a"])),
            Err(PagingFault::Repeated { .. })
        ));

        let mut paging = Paging::new(BOUNDS);
        assert_eq!(
            paging.objects(1, page(&["a", "b", "c"])),
            Err(PagingFault::PageOverLimit {
                page: 1,
                items: 3,
                limit: 2
            })
        );

        let mut paging = Paging::new(BOUNDS);
        for (i, names) in [["a", "b"], ["c", "d"]].iter().enumerate() {
            paging.objects(i + 1, page(names)).unwrap();
        }
        assert_eq!(
            paging.objects(3, page(&["e", "f"])),
            Err(PagingFault::TooManyObjects { bound: 5 })
        );

        // Empty pages with fresh tokens, forever: stopped at the bound, before asking again.
        let mut paging = Paging::new(BOUNDS);
        let tokens: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
        let mut sent: Option<&str> = None;
        let mut stopped = None;
        for next in &tokens {
            if let Err(fault) = paging.token(sent, Some(next)) {
                stopped = Some(fault);
                break;
            }
            sent = Some(next);
        }
        assert_eq!(stopped, Some(PagingFault::TooManyPages { bound: 4 }));
        assert_eq!(paging.pages(), 4);
    }
}
