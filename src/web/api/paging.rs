//! Paging of the list routes. Every list route takes `limit` (1 to
//! [`MAX_LIMIT`], default [`DEFAULT_LIMIT`]) and `cursor` (opaque: copied
//! from the link to the next page), refuses query parameters it does not
//! know, and answers a JSON array of at most `limit` items. When more
//! follow, the answer carries `Link: <URL>; rel="next"` (RFC 8288, as
//! GitHub's API pages) with the same filters and the next cursor: the body
//! stays an array, so a client that reads one page reads it as before.

use actix_web::{HttpRequest, HttpResponse};
use serde::Serialize;

use crate::web::error::ApiError;

/// The page size when a request gives no `limit`.
pub const DEFAULT_LIMIT: u32 = 100;

/// The largest page a request may ask for.
pub const MAX_LIMIT: u32 = 500;

/// The longest cursor accepted (cursors are ids, handles or names).
const MAX_CURSOR: usize = 256;

/// The header naming the next page's cursor alone, for clients that would
/// rather not parse `Link`.
pub const NEXT_CURSOR_HEADER: &str = "gantry-next-cursor";

/// `limit` and `cursor` of a list route with no other parameter.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Most items in the page: 1 to 500, default 100.
    pub limit: Option<u32>,
    /// Where the page starts: the cursor of the link to the next page.
    pub cursor: Option<String>,
}

impl PageQuery {
    /// The checked page it asks for.
    pub fn page(self) -> Result<Page, ApiError> {
        Page::new(self.limit, self.cursor)
    }
}

/// A checked page request: its size and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Most items in the page.
    pub limit: u32,
    /// Where it starts (`None`: at the first item).
    pub cursor: Option<String>,
}

impl Page {
    /// Checks `limit` (1 to [`MAX_LIMIT`]) and the cursor's length.
    pub fn new(limit: Option<u32>, cursor: Option<String>) -> Result<Page, ApiError> {
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::bad_request(format!(
                "limit {limit}: give 1 to {MAX_LIMIT}"
            )));
        }
        if let Some(c) = &cursor {
            if c.is_empty() || c.len() > MAX_CURSOR {
                return Err(ApiError::bad_request(
                    "cursor: copy it from the link to the next page",
                ));
            }
        }
        Ok(Page { limit, cursor })
    }

    /// How many items to fetch: one more than the page, to know whether a
    /// next page exists.
    pub fn fetch(&self) -> i64 {
        i64::from(self.limit) + 1
    }

    /// The cursor as an integer id (builds), or a 400 naming it.
    pub fn cursor_id(&self) -> Result<Option<i64>, ApiError> {
        self.cursor
            .as_deref()
            .map(|c| {
                c.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "cursor {c:?}: copy it from the link to the next page"
                    ))
                })
            })
            .transpose()
    }

    /// The page of `items` (fetched with [`Page::fetch`], in order), with
    /// a link to the next page when there are more; `cursor_of` gives the
    /// cursor that follows an item.
    pub fn answer<T: Serialize>(
        &self,
        req: &HttpRequest,
        mut items: Vec<T>,
        cursor_of: impl Fn(&T) -> String,
    ) -> HttpResponse {
        let limit = self.limit as usize;
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(&cursor_of)
        } else {
            None
        };
        let mut answer = HttpResponse::Ok();
        if let Some(cursor) = next {
            answer.insert_header((
                "link",
                format!("<{}>; rel=\"next\"", next_url(req, &cursor)),
            ));
            answer.insert_header((NEXT_CURSOR_HEADER, cursor));
        }
        answer.json(items)
    }

    /// A page of a list held in memory in its own order (a team's
    /// pipelines, as ordered): the cursor is the place of the next item.
    pub fn of_ordered<T: Serialize>(
        &self,
        req: &HttpRequest,
        items: Vec<T>,
    ) -> Result<HttpResponse, ApiError> {
        let start = self.cursor_id()?.unwrap_or(0).max(0) as usize;
        let page: Vec<(usize, T)> = items
            .into_iter()
            .enumerate()
            .skip(start)
            .take(self.fetch() as usize)
            .collect();
        let limit = self.limit as usize;
        let next = page.get(limit).map(|(i, _)| i.to_string());
        let items: Vec<T> = page.into_iter().take(limit).map(|(_, t)| t).collect();
        let mut answer = HttpResponse::Ok();
        if let Some(cursor) = next {
            answer.insert_header((
                "link",
                format!("<{}>; rel=\"next\"", next_url(req, &cursor)),
            ));
            answer.insert_header((NEXT_CURSOR_HEADER, cursor));
        }
        Ok(answer.json(items))
    }

    /// A page of a list held in memory, sorted by `key` (workers, teams):
    /// the items whose key sorts after the cursor.
    pub fn of_sorted<T: Serialize>(
        &self,
        req: &HttpRequest,
        mut items: Vec<T>,
        key: impl Fn(&T) -> String,
    ) -> HttpResponse {
        items.sort_by_key(&key);
        let start = match &self.cursor {
            Some(c) => items.partition_point(|i| key(i).as_str() <= c.as_str()),
            None => 0,
        };
        let page: Vec<T> = items
            .into_iter()
            .skip(start)
            .take(self.fetch() as usize)
            .collect();
        self.answer(req, page, key)
    }
}

/// The request's path and query with `cursor` set to `cursor`.
fn next_url(req: &HttpRequest, cursor: &str) -> String {
    let mut pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(req.query_string()).unwrap_or_default();
    pairs.retain(|(k, _)| k != "cursor");
    pairs.push(("cursor".into(), cursor.into()));
    let query = serde_urlencoded::to_string(&pairs).unwrap_or_default();
    format!("{}?{query}", req.path())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn limits_outside_their_range_are_refused() {
        assert_eq!(Page::new(None, None).unwrap().limit, DEFAULT_LIMIT);
        assert!(Page::new(Some(0), None).is_err());
        assert!(Page::new(Some(MAX_LIMIT + 1), None).is_err());
        assert!(Page::new(Some(1), Some(String::new())).is_err());
        assert!(Page::new(Some(1), Some("x".repeat(1000))).is_err());
        let page = Page::new(Some(2), Some("abc".into())).unwrap();
        assert_eq!(page.cursor_id().unwrap_err().status, 400);
    }

    #[actix_web::test]
    async fn a_full_page_links_to_the_next_with_the_same_filters() {
        let req = TestRequest::get()
            .uri("/api/v1/builds?team=main&limit=2&cursor=9")
            .to_http_request();
        let page = Page::new(Some(2), Some("9".into())).unwrap();
        let resp = page.answer(&req, vec![8, 7, 6], |i| i.to_string());
        let link = resp.headers().get("link").unwrap().to_str().unwrap();
        assert_eq!(
            link,
            "</api/v1/builds?team=main&limit=2&cursor=7>; rel=\"next\""
        );
        let last = page.answer(&req, vec![8, 7], |i| i.to_string());
        assert!(last.headers().get("link").is_none());
    }

    #[actix_web::test]
    async fn a_sorted_list_pages_after_its_cursor() {
        let req = TestRequest::get().uri("/api/v1/workers").to_http_request();
        let names = || vec!["c".to_string(), "a".into(), "b".into(), "d".into()];
        let page = Page::new(Some(2), Some("a".into())).unwrap();
        let resp = page.of_sorted(&req, names(), |s| s.clone());
        assert_eq!(
            resp.headers().get(NEXT_CURSOR_HEADER).unwrap(),
            "c",
            "b and c, then more"
        );
        let body = actix_web::body::to_bytes(resp.into_body()).await.unwrap();
        assert_eq!(&body[..], br#"["b","c"]"#);
    }
}
