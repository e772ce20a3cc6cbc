//! The report: the table of effects without and with toolonce, what happened in each scenario
//! and what toolonce did about it (words the README quotes), and the summary.

use std::process::ExitCode;
use std::time::Instant;

use toolonce::Outcome;

use super::runner::Figures;
use super::scenario::{CRASH_LEASE, Scenario};
use crate::output::{self, Align, Table, out, outln};

/// The width the explanations are wrapped at.
const WIDTH: usize = 96;

fn outcomes(figures: &Figures) -> String {
    let words: Vec<&str> = figures.calls.iter().map(|(o, _)| o.as_str()).collect();
    words.join(", ")
}

/// What happened: the scenario, then what toolonce did about it.
fn explain(scenario: Scenario, without: &Figures, with: &Figures) -> (String, String) {
    let w = without.effects;
    let did = outcomes(with);
    let first_key = with.calls.iter().find_map(|(_, k)| k.as_ref());
    match scenario {
        Scenario::Retry => (
            "The model provider timed out after charge_card had run, and the loop re-sent the \
             turn."
                .into(),
            format!(
                "Without toolonce the retry charged again ({w} charges). With it ({did}) the \
                 retry got the first receipt back from the store."
            ),
        ),
        Scenario::AskAgain => (
            "The model asked for the same charge again in a later turn, with a new tool_use id \
             (toolu_01, then toolu_02)."
                .into(),
            format!(
                "Without toolonce: {w} charges. The key ignores the tool_use id, so with it \
                 ({did}) the second call got the first receipt."
            ),
        ),
        Scenario::Crash => crash(without, with, first_key, &did),
        Scenario::EmailCrash => email_crash(without, with, first_key, &did),
        Scenario::Parallel => parallel(without, with, &did),
        Scenario::NestedControl => nested_control(with, &did),
    }
}

/// The agent killed after a charge whose provider honours the key.
fn crash(
    without: &Figures,
    with: &Figures,
    first_key: Option<&toolonce::OperationKey>,
    did: &str,
) -> (String, String) {
    let (w, t) = (without.effects, with.effects);
    let key = first_key.map_or("the same key".into(), |k| format!("the same key {k}"));
    let mut text = format!("Without toolonce: {w} charges. With it ({did}): ");
    if with.reclaimed {
        let resumed = with.resumed_in.map_or_else(String::new, output::duration);
        text += &format!(
            "the resumed run found the dead run's claim still running, waited for its \
             {} lease to expire (resumed in {resumed}), found the outcome unknown, and, \
             since charge_card declares that its provider honours the key (policy \
             rerun), ran charge_card again with {key}; ",
            output::duration(CRASH_LEASE)
        );
    } else {
        text += &format!("the resumed run ran charge_card again with {key}; ");
    }
    if with.answered_from_key > 0 {
        text += "the provider returned the original charge instead of charging again: \
                 saved by the Idempotency-Key handed downstream.";
    } else {
        text += &format!("{t} charge(s).");
    }
    (
        "The agent process was killed with SIGKILL right after the charge, before it \
         could record anything; a run resumed from its last checkpoint, taken before \
         the tool call, and replayed the call."
            .into(),
        text,
    )
}

/// The agent killed after an email, which no key protects downstream.
fn email_crash(
    without: &Figures,
    with: &Figures,
    first_key: Option<&toolonce::OperationKey>,
    did: &str,
) -> (String, String) {
    let (w, t) = (without.effects, with.effects);
    let setup = "The agent process was killed with SIGKILL right after send_email, whose \
                 mail server takes no idempotency key; a run resumed from its checkpoint \
                 and replayed the call."
        .to_owned();
    let result = if with.calls.iter().any(|(o, _)| *o == Outcome::Unknown) {
        let key = first_key.map_or_else(|| "KEY".to_owned(), ToString::to_string);
        format!(
            "Without toolonce: {w} emails. With it ({did}): the resumed run waited for \
             the dead run's {} lease to expire and found the outcome unknown; \
             send_email keeps the default policy (hold), so it was not sent again \
             ({t} email): the model was told the email may have been sent, not to \
             retry, and that a person must check, who then settles it with `toolonce \
             resolve {key} --done JSON | --failed MESSAGE | --release`.",
            output::duration(CRASH_LEASE)
        )
    } else {
        format!("Without toolonce: {w} emails. With it ({did}): {t} email(s).")
    };
    (setup, result)
}

/// The same call twice in one reply, run at once.
fn parallel(without: &Figures, with: &Figures, did: &str) -> (String, String) {
    let w = without.effects;
    let other = match with
        .calls
        .iter()
        .map(|(o, _)| *o)
        .find(|o| *o != Outcome::Executed)
    {
        Some(Outcome::InFlight) => {
            "the other was told the charge is already in flight and must not be retried"
        }
        Some(Outcome::Replayed) => "the other got the first receipt",
        _ => "the other did not charge",
    };
    (
        "The model put the same call twice in one reply, and the loop ran both at once.".into(),
        format!("Without toolonce: {w} charges. With it ({did}) one call charged; {other}."),
    )
}

/// Two calls that differ only in a nested field: two operations.
fn nested_control(with: &Figures, did: &str) -> (String, String) {
    let t = with.effects;
    let keys: Vec<String> = with
        .calls
        .iter()
        .filter_map(|(_, k)| k.as_ref().map(ToString::to_string))
        .collect();
    (
        "Two charges whose arguments differ only in a nested field, payment.card (A, then \
         B), are two operations and must both happen."
            .into(),
        format!(
            "With toolonce: {t} charges ({did}), under two keys ({}). A key over the \
             top-level fields only would merge them and give card B card A's receipt.",
            keys.join(" and ")
        ),
    )
}

/// Prints the table, what happened in each scenario, and the summary; the exit code says
/// whether every figure with toolonce is right. `started` is when the demo started.
pub(super) fn print(
    rows: &[(Scenario, Figures, Option<Figures>)],
    started: Instant,
) -> anyhow::Result<ExitCode> {
    print_table(rows)?;
    outln!();
    print_explanations(rows)?;
    outln!();
    let (summary, wrong) = summary(rows, started);
    out!("{}", output::wrap("", &summary, WIDTH));
    Ok(if wrong == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The effects of each scenario without and with toolonce, beside the expected figure.
fn print_table(rows: &[(Scenario, Figures, Option<Figures>)]) -> anyhow::Result<()> {
    let mut table = Table::new(
        &[
            ("scenario", Align::Left),
            ("effects without", Align::Right),
            ("effects with", Align::Right),
            ("expected", Align::Right),
            ("ok", Align::Left),
        ],
        " | ",
    );
    for (scenario, without, with) in rows {
        let (with, ok) = match with {
            Some(with) if with.effects == scenario.expected() => (with.effects.to_string(), "yes"),
            Some(with) => (with.effects.to_string(), "NO"),
            None => ("-".to_owned(), "skipped"),
        };
        table.row(vec![
            scenario.label().into(),
            without.effects.to_string(),
            with,
            scenario.expected().to_string(),
            ok.into(),
        ]);
    }
    out!("{}", table.render());
    Ok(())
}

/// What happened in each scenario, and what toolonce did about it.
fn print_explanations(rows: &[(Scenario, Figures, Option<Figures>)]) -> anyhow::Result<()> {
    for (scenario, without, with) in rows {
        let (setup, result) = match with {
            Some(with) => explain(*scenario, without, with),
            None => (
                explain(*scenario, without, without).0,
                format!(
                    "Without toolonce: {} emails. Skipped with toolonce: a memory:// store lives \
                     in one process, so the resumed run cannot see the dead run's claim, and \
                     with no key downstream nothing else can stop the second email. Run the \
                     demo on a store that outlives the process (the default SQLite file).",
                    without.effects
                ),
            ),
        };
        let number = match scenario.label().split_once(' ') {
            Some((number, _)) => format!("{number} "),
            None => String::new(),
        };
        out!("{}", output::wrap(&number, &setup, WIDTH));
        out!(
            "{}",
            output::wrap(&" ".repeat(number.len()), &result, WIDTH)
        );
    }
    Ok(())
}

/// The summary line, and how many figures with toolonce are wrong.
fn summary(rows: &[(Scenario, Figures, Option<Figures>)], started: Instant) -> (String, usize) {
    // The rows run with toolonce (a skipped one is not counted either way).
    let ran: Vec<(Scenario, &Figures, &Figures)> = rows
        .iter()
        .filter_map(|(s, without, with)| with.as_ref().map(|with| (*s, without, with)))
        .collect();
    let skipped = rows.len() - ran.len();
    let wrong = ran
        .iter()
        .filter(|(s, _, w)| w.effects != s.expected())
        .count();
    let extra = |pick: fn(&(Scenario, &Figures, &Figures)) -> usize| -> usize {
        ran.iter()
            .map(|r| pick(r).saturating_sub(r.0.expected()))
            .sum()
    };
    let (extra_without, extra_with) = (extra(|r| r.1.effects), extra(|r| r.2.effects));
    let took = output::duration(started.elapsed());
    let skipped = if skipped > 0 {
        format!(" {skipped} skipped (see above).")
    } else {
        String::new()
    };
    let summary = if wrong == 0 {
        format!(
            "All {} \"with\" figures are right: without toolonce {extra_without} duplicate \
             effect(s) (charges, emails), with it {extra_with}.{skipped} ({took})",
            ran.len()
        )
    } else {
        format!(
            "{wrong} of {} \"with\" figures are WRONG: duplicate effects without toolonce \
             {extra_without}, with it {extra_with}.{skipped} ({took})",
            ran.len()
        )
    };
    (summary, wrong)
}
