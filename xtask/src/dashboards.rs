//! `cargo xtask check-dashboards`: offline checks of the Grafana dashboards in dashboards/.
//!
//! 1. Types: each dashboard, as a TypeScript literal, must `satisfies` Grafana's published
//!    `Dashboard` type (npm `@grafana/schema`), and every panel must satisfy the options
//!    and field-config types of its panel plugin; `tsc --noEmit --strict` judges.
//! 2. PromQL: every query (panel targets, also inside rows, and PromQL in template
//!    variables), with Grafana's variables substituted (see [`substitute`]), goes into a
//!    Prometheus rules file that `promtool check rules` must accept.
//! 3. Metrics: every metric name a query uses must be one the agent exports (asked of the
//!    agent itself: `volguard metrics-reference --names`).
//! 4. The example alerting rules (see `crate::alert_rules`).
//!
//! typescript and @grafana/schema are installed at pinned versions into [`CHECK_DIR`] by
//! `cargo xtask setup`, or here on first use.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::{
    nodejs::{TYPESCRIPT_VERSION, check_node},
    proc::{json_files, run_logged, workspace_root},
    promql::{Exported, metric_names},
};

pub const GRAFANA_SCHEMA_VERSION: &str = "13.2.3";
pub const CHECK_DIR: &str = "/var/cache/volguard-dev/dashboard-check";

/// Installs the pinned npm packages into [`CHECK_DIR`] unless they are there already.
pub fn install_tools() -> anyhow::Result<()> {
    check_node()?;
    let dir = Path::new(CHECK_DIR);
    let installed = |package: &str| -> Option<String> {
        let text = fs::read_to_string(dir.join("node_modules").join(package).join("package.json")).ok()?;
        let manifest: Value = serde_json::from_str(&text).ok()?;
        manifest["version"].as_str().map(str::to_owned)
    };
    if installed("typescript").as_deref() == Some(TYPESCRIPT_VERSION)
        && installed("@grafana/schema").as_deref() == Some(GRAFANA_SCHEMA_VERSION)
    {
        println!(
            "dashboards: typescript {TYPESCRIPT_VERSION} and @grafana/schema {GRAFANA_SCHEMA_VERSION} present in {CHECK_DIR}"
        );
        return Ok(());
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {CHECK_DIR} (run `cargo xtask setup` as root)"))?;
    let manifest = json!({
        "name": "volguard-dashboard-check",
        "private": true,
        "description": "written by `cargo xtask`: the tools that type-check dashboards/",
        "dependencies": { "typescript": TYPESCRIPT_VERSION, "@grafana/schema": GRAFANA_SCHEMA_VERSION },
    });
    fs::write(dir.join("package.json"), serde_json::to_string_pretty(&manifest)? + "\n")?;
    run_logged(
        Command::new("npm").current_dir(dir).args(["install", "--no-audit", "--no-fund", "--loglevel=error"]),
        "dashboards: npm install",
        "setup/npm-dashboards",
    )
    .context("installing the dashboard check's npm packages")
}

/// Per dashboard: what each check found.
struct Report {
    name: String,
    queries: Vec<Query>,
    types: Result<(), String>,
    promql: Result<(), String>,
    unknown_metrics: Vec<(String, String)>,
    metrics: BTreeSet<String>,
}

pub fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    install_tools()?;
    let promtool =
        which("promtool").context("promtool is missing: run `cargo xtask setup` (Debian package prometheus)")?;
    let dashboards = dashboard_files()?;
    if dashboards.is_empty() {
        bail!("no dashboards in {}", workspace_root().join("dashboards").display());
    }
    let work = Path::new(CHECK_DIR).join("work");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;

    let exported = Exported::from_agent()?;
    let mut reports = Vec::new();
    let mut ts_files = Vec::new();
    for path in &dashboards {
        let name = path.file_stem().expect("a file name").to_string_lossy().into_owned();
        let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut dashboard: Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
        if let Some(object) = dashboard.as_object_mut() {
            for key in ["__inputs", "__requires", "__elements"] {
                object.remove(key);
            }
        }
        let ts = work.join(format!("{name}.ts"));
        fs::write(&ts, typescript_check(&dashboard))?;
        ts_files.push(ts);

        let queries = queries(&dashboard);
        let rules = work.join(format!("{name}.rules.yml"));
        fs::write(&rules, rules_file(&name, &queries))?;
        let promql = match Command::new(&promtool).arg("check").arg("rules").arg(&rules).output() {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(format!(
                "{}{}\n  (rule qN is the N-th query listed below)",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => Err(format!("could not run promtool: {e}")),
        };
        let mut metrics = BTreeSet::new();
        let mut unknown_metrics = Vec::new();
        for query in &queries {
            for metric in metric_names(&query.expr) {
                if !exported.knows(&metric) {
                    unknown_metrics.push((query.source.clone(), metric.clone()));
                }
                metrics.insert(metric);
            }
        }
        reports.push(Report { name, queries, types: Ok(()), promql, unknown_metrics, metrics });
    }

    // One tsc run for all dashboards (its start-up dominates); errors are attributed by file.
    let tsc = Path::new(CHECK_DIR).join("node_modules/.bin/tsc");
    let out = Command::new(&tsc)
        .current_dir(&work)
        .args(["--noEmit", "--strict", "--skipLibCheck", "--target", "es2022", "--module", "esnext"])
        .args(["--moduleResolution", "bundler", "--pretty", "false"])
        .args(&ts_files)
        .output()
        .with_context(|| format!("running {}", tsc.display()))?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        for report in &mut reports {
            let prefix = format!("{}.ts(", report.name);
            let errors: Vec<&str> = text.lines().filter(|l| l.starts_with(&prefix)).collect();
            if !errors.is_empty() {
                report.types = Err(errors.join("\n"));
            }
        }
        if reports.iter().all(|r| r.types.is_ok()) {
            bail!("tsc failed without naming a dashboard:\n{text}");
        }
    }

    let mut failed = false;
    for report in &reports {
        println!("\n--- dashboards/{}.json", report.name);
        match &report.types {
            Ok(()) => println!(
                "ok     types: satisfies @grafana/schema {GRAFANA_SCHEMA_VERSION} Dashboard and its panels' options"
            ),
            Err(e) => println!("FAILED types (tsc, lines of {}/{}.ts):\n{e}", work.display(), report.name),
        }
        match &report.promql {
            Ok(()) => println!("ok     promql: {} queries parse (promtool check rules)", report.queries.len()),
            Err(e) => println!("FAILED promql:\n{}", e.trim_end()),
        }
        if report.unknown_metrics.is_empty() {
            println!("ok     metrics: all {} named are exported by the agent", report.metrics.len());
        } else {
            println!("FAILED metrics: not exported by the agent:");
            for (source, metric) in &report.unknown_metrics {
                println!("         {metric}  (in {source})");
            }
        }
        let ok = report.types.is_ok() && report.promql.is_ok() && report.unknown_metrics.is_empty();
        if report.promql.is_err() || !report.unknown_metrics.is_empty() {
            for (i, query) in report.queries.iter().enumerate() {
                println!("  q{i:<3} {}: {}", query.source, query.expr);
            }
        }
        failed |= !ok;
    }
    let rules = crate::alert_rules::check(&workspace_root().join("dashboards"), &promtool, &exported);
    if let Err(e) = &rules {
        println!("{e}");
    }
    failed |= rules.is_err();
    println!(
        "\ndashboards: checked {} and the alerting rules in {:.1} s",
        reports.len(),
        started.elapsed().as_secs_f64()
    );
    if failed {
        bail!("dashboard checks failed");
    }
    Ok(())
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

fn dashboard_files() -> anyhow::Result<Vec<PathBuf>> {
    json_files(&workspace_root().join("dashboards"))
}

/// The TypeScript whose type check is the schema check. The schema's string enums
/// (e.g. `FieldColorModeId`) are nominal in TypeScript, so `Json<T>` turns them into the
/// string literals the JSON holds; panel plugin options are checked as deep partials
/// (Grafana fills in the defaults), but unknown keys and wrong types are still errors,
/// and a panel type without a plugin schema below is an error too.
fn typescript_check(dashboard: &Value) -> String {
    // Panel type, its module under raw/composable/, and whether it has a custom FieldConfig.
    const PANELS: &[(&str, &str, bool)] = &[
        ("timeseries", "timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen", true),
        ("stat", "stat/panelcfg/x/StatPanelCfg_types.gen", false),
        ("table", "table/panelcfg/x/TablePanelCfg_types.gen", true),
        ("heatmap", "heatmap/panelcfg/x/HeatmapPanelCfg_types.gen", true),
        ("state-timeline", "statetimeline/panelcfg/x/StateTimelinePanelCfg_types.gen", true),
        ("status-history", "statushistory/panelcfg/x/StatusHistoryPanelCfg_types.gen", true),
        ("bargauge", "bargauge/panelcfg/x/BarGaugePanelCfg_types.gen", false),
        ("gauge", "gauge/panelcfg/x/GaugePanelCfg_types.gen", false),
        ("barchart", "barchart/panelcfg/x/BarChartPanelCfg_types.gen", true),
        ("piechart", "piechart/panelcfg/x/PieChartPanelCfg_types.gen", true),
        ("text", "text/panelcfg/x/TextPanelCfg_types.gen", false),
    ];
    let mut ts =
        String::from("import type { Dashboard, FieldConfigSource, Panel, RowPanel } from '@grafana/schema';\n");
    let mut union = Vec::new();
    for (i, (ty, module, custom)) in PANELS.iter().enumerate() {
        ts += &format!("import type * as P{i} from '@grafana/schema/dist/esm/raw/composable/{module}';\n");
        let field_config = if *custom { format!("P{i}.FieldConfig") } else { "{}".to_owned() };
        union.push(format!("PanelOf<'{ty}', P{i}.Options, {field_config}>"));
    }
    ts += r#"
type Json<T> = T extends string ? `${T}` : T extends readonly (infer U)[] ? Json<U>[] : T extends object ? { [K in keyof T]: Json<T[K]> } : T;
type Loose<T> = T extends string ? `${T}` : T extends readonly (infer U)[] ? Loose<U>[] : T extends object ? { [K in keyof T]?: Loose<T[K]> } : T;
type Defaults = Json<FieldConfigSource['defaults']>;
type PanelOf<Type extends string, Options, Custom> = Omit<Json<Panel>, 'type' | 'options' | 'fieldConfig'> & {
  type: Type;
  options?: Loose<Options>;
  fieldConfig?: Omit<Json<FieldConfigSource>, 'defaults'> & { defaults: Omit<Defaults, 'custom'> & { custom?: Loose<Custom> } };
};
"#;
    ts += &format!("type AnyPanel =\n  | {};\n", union.join("\n  | "));
    ts += "type Row = Omit<Json<RowPanel>, 'panels'> & { panels: AnyPanel[] };\n";
    ts += "type StrictDashboard = Omit<Json<Dashboard>, 'panels'> & { panels?: (AnyPanel | Row)[] };\n\n";
    ts += &format!(
        "export const dashboard = {} satisfies StrictDashboard;\ndashboard satisfies Json<Dashboard>;\n",
        serde_json::to_string_pretty(dashboard).expect("JSON")
    );
    ts
}

/// One PromQL expression of a dashboard, already substituted, and where it came from.
#[derive(Debug, Clone)]
pub struct Query {
    pub source: String,
    pub expr: String,
}

/// Every PromQL expression in a dashboard: `targets[].expr` of every panel (rows'
/// nested panels too) and the PromQL inside query variables (`label_values(<expr>, l)`,
/// `query_result(<expr>)`), each through [`substitute`].
pub fn queries(dashboard: &Value) -> Vec<Query> {
    fn walk(panels: &Value, out: &mut Vec<Query>) {
        for panel in panels.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?");
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str().filter(|e| !e.trim().is_empty()) {
                    let source = format!("panel {:?} {}", title, target["refId"].as_str().unwrap_or(""));
                    out.push(Query { source, expr: substitute(expr) });
                }
            }
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"].as_str().or(variable["query"].as_str()).unwrap_or("").trim();
        let inner = if let Some(args) = query.strip_prefix("label_values(").and_then(|q| q.strip_suffix(')')) {
            // label_values(<series selector>, <label>); the one-argument form names no series.
            args.rsplit_once(',').map(|(selector, _)| selector.trim())
        } else {
            query.strip_prefix("query_result(").and_then(|q| q.strip_suffix(')')).map(str::trim)
        };
        if let Some(expr) = inner.filter(|e| !e.is_empty()) {
            let source = format!("variable {:?}", variable["name"].as_str().unwrap_or("?"));
            out.push(Query { source, expr: substitute(expr) });
        }
    }
    out
}

/// Grafana's built-in intervals become fixed durations; every other `$var`, `${var}` or
/// `${var:format}` becomes `.*` (what an "All" with allValue `.*` sends, a valid regex
/// that matches every series, so the query also returns data on a real Prometheus).
pub fn substitute(expr: &str) -> String {
    const BUILTINS: &[(&str, &str)] = &[
        ("__rate_interval_ms", "300000"),
        ("__rate_interval", "5m"),
        ("__interval_ms", "60000"),
        ("__interval", "1m"),
        ("__range_ms", "3600000"),
        ("__range_s", "3600"),
        ("__range", "1h"),
    ];
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out += &rest[..at];
        rest = &rest[at + 1..];
        let (name, after) = if let Some(braced) = rest.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (braced[..end].split(':').next().unwrap_or(""), &braced[end + 1..]),
                None => ("", rest),
            }
        } else {
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        };
        if name.is_empty() {
            out.push('$');
            continue;
        }
        out += BUILTINS.iter().find(|(b, _)| *b == name).map_or(".*", |(_, value)| value);
        rest = after;
    }
    out + rest
}

fn rules_file(dashboard: &str, queries: &[Query]) -> String {
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| json!({ "record": format!("dashboard_check:q{i}"), "expr": q.expr }))
        .collect();
    // JSON is YAML.
    serde_json::to_string_pretty(&json!({ "groups": [{ "name": dashboard, "rules": rules }] })).expect("JSON") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_builtins_and_variables() {
        assert_eq!(
            substitute(r#"rate(m{a=~"$node", b=~"${cluster}", c=~"${ns:regex}"}[$__rate_interval]) + $__range_s"#),
            r#"rate(m{a=~".*", b=~".*", c=~".*"}[5m]) + 3600"#
        );
        assert_eq!(substitute("x[$__interval] offset $__range"), "x[1m] offset 1h");
        assert_eq!(substitute("a $ b"), "a $ b");
    }

    #[test]
    fn extracts_from_rows_and_variables() {
        let dashboard = json!({
            "panels": [
                { "type": "row", "title": "r", "collapsed": true, "panels": [
                    { "type": "stat", "title": "inner", "targets": [{ "refId": "A", "expr": "up[$__range]" }] },
                ]},
                { "type": "text", "title": "no targets" },
            ],
            "templating": { "list": [
                { "type": "datasource", "name": "datasource", "query": "prometheus" },
                { "type": "query", "name": "node", "query": "label_values(volguard_build_info{cluster=~\"$cluster\"}, node)" },
                { "type": "query", "name": "q", "query": { "query": "query_result(max by (x) (y))" } },
                { "type": "query", "name": "l", "query": "label_values(node)" },
            ]},
        });
        let found: Vec<(String, String)> = queries(&dashboard).into_iter().map(|q| (q.source, q.expr)).collect();
        assert_eq!(
            found,
            [
                (r#"panel "inner" A"#.to_owned(), "up[1h]".to_owned()),
                (r#"variable "node""#.to_owned(), r#"volguard_build_info{cluster=~".*"}"#.to_owned()),
                (r#"variable "q""#.to_owned(), "max by (x) (y)".to_owned()),
            ]
        );
    }

    #[test]
    fn every_dashboard_names_only_exported_metrics() {
        for path in dashboard_files().unwrap() {
            let dashboard: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
            let queries = queries(&dashboard);
            assert!(!queries.is_empty(), "{}", path.display());
            for q in queries {
                assert!(!q.expr.contains('$'), "{}: {}", q.source, q.expr);
                assert!(!metric_names(&q.expr).is_empty(), "{}: no metric in {}", path.display(), q.source);
            }
        }
    }
}
