//! The target claim (one run per target): exclusive, renewed, released,
//! taken over when expired or its holder is gone, and exactly one of
//! concurrent claimers wins.

use super::checks::ok;
use super::{STANDARD_NAMES, TargetFixture, TargetHarness};
use dpone_core::ports::{ClaimAttempt, ClaimRequest, ErrorKind, Target, TargetClaim};

fn request(holder: &str, token: &str, ttl_ms: u64, stale: Option<&str>) -> ClaimRequest {
    ClaimRequest { holder: holder.into(), token: token.into(), ttl_ms, stale_holder: stale.map(str::to_string) }
}

async fn granted<T: Target>(check: &str, t: &T, r: ClaimRequest) -> TargetClaim {
    match ok(check, "claim", t.claim(&r).await) {
        ClaimAttempt::Granted(c) => {
            assert_eq!(
                (c.holder.as_str(), c.token.as_str()),
                (r.holder.as_str(), r.token.as_str()),
                "[{check}] the grant names the request"
            );
            c
        }
        ClaimAttempt::Held(h) => panic!("[{check}] {} was refused: held by {h:?}", r.holder),
    }
}

async fn held_by<T: Target>(check: &str, t: &T, r: ClaimRequest, holder: &str) -> dpone_core::ports::ClaimHolder {
    match ok(check, "claim", t.claim(&r).await) {
        ClaimAttempt::Held(h) => {
            assert_eq!(h.holder, holder, "[{check}] the refusal names the holder");
            h
        }
        ClaimAttempt::Granted(_) => panic!("[{check}] {} was granted a claim {holder} holds", r.holder),
    }
}

async fn lost<T: Target>(check: &str, t: &T, c: &TargetClaim, what: &str) {
    let e = t.renew_claim(c, 60_000, "r").await.expect_err(&format!("[{check}] {what}: the renewal must fail"));
    assert_eq!((e.kind, e.code.as_str()), (ErrorKind::LeaseLost, "claim_lost"), "[{check}] {what}: {e:?}");
}

pub async fn claims_exclude_each_other<H: TargetHarness>(h: &H) {
    const C: &str = "claims_exclude_each_other";
    let f = h.fresh(STANDARD_NAMES).await;
    let t = f.target();
    let owned_before = ok(C, "owned_tables", t.owned_tables().await);
    let a = granted(C, t, request("run a", "ta", 60_000, None)).await;
    let held = held_by(C, t, request("run b", "tb", 60_000, None), "run a").await;
    assert!(held.remaining_ms > 50_000 && held.remaining_ms <= 60_000, "[{C}] the remaining time is the TTL's: {held:?}");
    ok(C, "renew_claim", t.renew_claim(&a, 60_000, "run-id-a").await);
    assert_eq!(held_by(C, t, request("run b", "tb", 60_000, None), "run a").await.run, "run-id-a", "[{C}] the renewal records the run");
    assert_eq!(ok(C, "owned_tables", t.owned_tables().await), owned_before, "[{C}] a claim is no run's owned table");
    // The same holder text with another token (a restarted process of the
    // same name) is granted, and the older grant is gone.
    let a2 = granted(C, t, request("run a", "ta2", 60_000, None)).await;
    lost(C, t, &a, "a grant superseded by the same holder").await;
    ok(C, "release_claim", t.release_claim(&a).await);
    held_by(C, t, request("run b", "tb", 60_000, None), "run a").await;
    ok(C, "release_claim", t.release_claim(&a2).await);
    let b = granted(C, t, request("run b", "tb", 60_000, None)).await;
    // A holder known to be gone is taken over at once; another gone holder says nothing.
    held_by(C, t, request("run c", "tc", 60_000, Some("run x")), "run b").await;
    let c = granted(C, t, request("run c", "tc", 60_000, Some("run b"))).await;
    lost(C, t, &b, "a claim taken over").await;
    ok(C, "release_claim (no longer held)", t.release_claim(&b).await);
    held_by(C, t, request("run d", "td", 60_000, None), "run c").await;
    ok(C, "release_claim", t.release_claim(&c).await);
    // An expired claim is free; its holder learns it lost the claim.
    let d = granted(C, t, request("run d", "td", 1_000, None)).await;
    held_by(C, t, request("run e", "te", 60_000, None), "run d").await;
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let e = granted(C, t, request("run e", "te", 60_000, None)).await;
    lost(C, t, &d, "an expired claim taken over").await;
    ok(C, "release_claim", t.release_claim(&e).await);
    // Of concurrent claimers exactly one wins; the others name it.
    let requests: Vec<ClaimRequest> = (0..6).map(|i| request(&format!("racer {i}"), &format!("tr{i}"), 60_000, None)).collect();
    let results = futures_util::future::join_all(requests.iter().map(|r| t.claim(r))).await;
    let results: Vec<ClaimAttempt> = results.into_iter().map(|r| ok(C, "concurrent claim", r)).collect();
    let winners: Vec<&TargetClaim> = results.iter().filter_map(|r| if let ClaimAttempt::Granted(c) = r { Some(c) } else { None }).collect();
    assert_eq!(winners.len(), 1, "[{C}] exactly one concurrent claimer wins: {results:?}");
    for r in &results {
        if let ClaimAttempt::Held(h) = r {
            assert_eq!(h.holder, winners[0].holder, "[{C}] a loser names the winner");
        }
    }
    ok(C, "release_claim", t.release_claim(winners[0]).await);
    granted(C, t, request("after", "tz", 60_000, None)).await;
    f.cleanup().await;
}
