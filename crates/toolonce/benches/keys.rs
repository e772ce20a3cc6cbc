//! Canonicalization and key derivation (canonicalize once, hash twice) on a small and a large
//! argument document, beside serde_json, serde_jcs and SHA-256 alone. For derivation, two
//! baselines: plain `serde_json::to_string` + one SHA-256 (the least any key could
//! cost) and `serde_jcs::to_string` + one SHA-256 (the RFC 8785 crate we don't use). Derivation
//! hashes twice (the key and the fingerprint), the baselines once.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolonce::key::derive;

/// An email to send: about 200 bytes of canonical JSON.
fn email() -> Value {
    json!({
        "to": ["ana.moreau@example.com", "ops@example.com"],
        "subject": "Your invoice INV-2026-1142",
        "body": "Hi Ana, your invoice of EUR 129.90 is attached. Thank you!",
        "reply_to": "billing@example.com",
        "priority": "normal"
    })
}

/// A support ticket with line items: about 20 KB of canonical JSON.
fn ticket() -> Value {
    let items: Vec<Value> = (0..80)
        .map(|i| {
            json!({
                "sku": format!("SKU-{i:05}"),
                "description": format!("Replacement part {i} for the espresso machine, model EM-{}", 100 + i % 7),
                "quantity": 1 + i % 4,
                "unit_price": 12.5 + f64::from(i) * 0.35,
                "tax": {"code": "VAT", "rate": 0.2},
                "shipping": {"method": if i % 3 == 0 { "express" } else { "standard" }, "weight_kg": 0.25 * f64::from(1 + i % 5)},
                "tags": ["spare-part", "warranty", format!("batch-{}", i / 10)]
            })
        })
        .collect();
    json!({
        "customer": {
            "id": 90071992547409931_u64,
            "name": "Zoë Ångström",
            "email": "zoe@example.com",
            "address": {"street": "12 Rue de l'Église", "city": "Lyon", "postcode": "69002", "country": "FR"}
        },
        "title": "Order 2026-11-29/4411 arrived damaged",
        "description": "The parcel arrived with a crushed corner.\nSeveral parts are bent; photos attached.\n\"Please replace\" — the customer.",
        "priority": "high",
        "line_items": items,
        "watchers": ["support-lead@example.com", "warehouse@example.com"],
        "labels": {"channel": "email", "language": "fr", "sla": "48h"}
    })
}

fn baseline_plain(args: &Value) -> [u8; 32] {
    Sha256::digest(serde_json::to_string(args).unwrap()).into()
}

fn baseline_jcs(args: &Value) -> [u8; 32] {
    Sha256::digest(serde_jcs::to_string(args).unwrap()).into()
}

fn documents() -> [(&'static str, Value); 2] {
    [("email", email()), ("ticket", ticket())]
}

fn bench_derive(c: &mut Criterion) {
    let mut group = c.benchmark_group("derive");
    for (name, args) in documents() {
        let size = toolonce::canonical::canonicalize(&args).unwrap().len();
        group.throughput(Throughput::Bytes(size as u64));
        let label = format!("{name} ({size} B)");
        group.bench_with_input(BenchmarkId::new("toolonce", &label), &args, |b, args| {
            b.iter(|| {
                derive(
                    black_box("run-1"),
                    black_box("send_email"),
                    black_box(args),
                    None,
                )
            })
        });
        group.bench_with_input(
            BenchmarkId::new("serde_json+sha256", &label),
            &args,
            |b, args| b.iter(|| baseline_plain(black_box(args))),
        );
        group.bench_with_input(
            BenchmarkId::new("serde_jcs+sha256", &label),
            &args,
            |b, args| b.iter(|| baseline_jcs(black_box(args))),
        );
    }
    group.finish();
}

fn bench_canonicalize(c: &mut Criterion) {
    let mut group = c.benchmark_group("canonicalize");
    for (name, args) in documents() {
        let size = toolonce::canonical::canonicalize(&args).unwrap().len();
        group.throughput(Throughput::Bytes(size as u64));
        let label = format!("{name} ({size} B)");
        group.bench_with_input(BenchmarkId::new("toolonce", &label), &args, |b, args| {
            b.iter(|| toolonce::canonical::canonicalize(black_box(args)))
        });
        group.bench_with_input(BenchmarkId::new("serde_json", &label), &args, |b, args| {
            b.iter(|| serde_json::to_string(black_box(args)))
        });
        group.bench_with_input(BenchmarkId::new("serde_jcs", &label), &args, |b, args| {
            b.iter(|| serde_jcs::to_string(black_box(args)))
        });
        let text = serde_json::to_string(&args).unwrap();
        group.bench_with_input(
            BenchmarkId::new("sha256 alone", &label),
            &text,
            |b, text| b.iter(|| Sha256::digest(black_box(text))),
        );
    }
    group.finish();
}

criterion_group!(benches, bench_canonicalize, bench_derive);

/// Mean time of `f` over about half a second.
fn time(mut f: impl FnMut()) -> Duration {
    let mut runs = 0u32;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(500) {
        for _ in 0..100 {
            f();
        }
        runs += 100;
    }
    start.elapsed() / runs
}

/// Prints how derivation compares to the baselines.
fn print_ratios() {
    for (name, args) in documents() {
        let ours = time(|| {
            black_box(derive("run-1", "send_email", black_box(&args), None).unwrap());
        });
        let plain = time(|| {
            black_box(baseline_plain(black_box(&args)));
        });
        let jcs = time(|| {
            black_box(baseline_jcs(black_box(&args)));
        });
        println!(
            "{name}: derive {ours:?} = {:.2}x serde_json+sha256 ({plain:?}), {:.2}x serde_jcs+sha256 ({jcs:?})",
            ours.as_secs_f64() / plain.as_secs_f64(),
            ours.as_secs_f64() / jcs.as_secs_f64(),
        );
    }
}

fn main() {
    benches();
    // Under `cargo test` the bench binary runs without `--bench`: skip the timing there.
    if std::env::args().any(|arg| arg == "--bench") {
        print_ratios();
    }
    Criterion::default().configure_from_args().final_summary();
}
