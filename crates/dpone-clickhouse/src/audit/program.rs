//! PostgreSQL's lookup3 (`hash_bytes_extended`, docs/audit.md) as
//! ClickHouse SQL: a straight-line program of 32-bit steps, laid out as
//! nested subqueries.
//!
//! ClickHouse's analyzer inlines every alias reference into the query tree,
//! so a chain of aliases that each use earlier ones twice grows
//! exponentially ("Query tree is too big" after one lookup3 `final`). Each
//! step therefore becomes a column of a subquery layer: a step sits one
//! layer above the latest of its inputs ([`Program::let_`]), and each layer
//! selects the columns later layers still read. Steps whose inputs are all
//! known when the SQL is built are folded into constants (the state after
//! a constant seed and length, the first lines of a `final`), so a 32-bit
//! key costs one `final` of seven steps. Inside the lambda of a string's
//! block loop ([`Program::fold_mix`]) aliases are used instead: a lambda
//! body is one expression, and one `mix` inlined stays small (about 1,200
//! nodes).

use dpone_core::audit::canon;
use std::collections::BTreeMap;

/// A 32-bit value of the program: known now, or a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum U {
    C(u32),
    N(String),
}

impl U {
    /// The value as SQL of type UInt32.
    fn sql(&self) -> String {
        match self {
            U::C(v) => format!("toUInt32({v})"),
            U::N(n) => n.clone(),
        }
    }

    fn name(&self) -> Option<&str> {
        match self {
            U::C(_) => None,
            U::N(n) => Some(n),
        }
    }
}

/// lookup3's state (a, b, c).
pub type State = [U; 3];

#[derive(Debug, Clone)]
struct Let {
    name: String,
    expr: String,
    layer: usize,
    deps: Vec<String>,
}

/// Steps over the columns a scan reads (`source` items, layer 0).
#[derive(Debug, Default)]
pub struct Program {
    sources: Vec<(String, String)>,
    lets: Vec<Let>,
    layers: BTreeMap<String, usize>,
}

impl Program {
    /// A column the scan reads: `expr` of the table's columns, named.
    pub fn source(&mut self, expr: String) -> String {
        let name = format!("_s{}", self.sources.len());
        self.sources.push((name.clone(), expr));
        self.layers.insert(name.clone(), 0);
        name
    }

    /// A step computing `expr` from the columns `deps`, one layer above the
    /// latest of them.
    pub fn let_(&mut self, expr: String, deps: &[&str]) -> String {
        let name = format!("_r{}", self.lets.len());
        let layer = 1 + deps.iter().map(|d| self.layers.get(*d).copied().unwrap_or(0)).max().unwrap_or(0);
        self.layers.insert(name.clone(), layer);
        self.lets.push(Let { name: name.clone(), expr, layer, deps: deps.iter().map(|d| d.to_string()).collect() });
        name
    }

    /// A 32-bit step `op(x, y)`: folded when both are known.
    fn op(&mut self, x: &U, y: &U, fold: impl Fn(u32, u32) -> u32, sql: impl Fn(&str, &str) -> String) -> U {
        if let (U::C(a), U::C(b)) = (x, y) {
            return U::C(fold(*a, *b));
        }
        let deps: Vec<&str> = [x.name(), y.name()].into_iter().flatten().collect();
        U::N(self.let_(sql(&x.sql(), &y.sql()), &deps))
    }

    /// `x + y` (mod 2^32).
    pub fn add(&mut self, x: &U, y: &U) -> U {
        self.op(x, y, u32::wrapping_add, |a, b| format!("toUInt32({a} + {b})"))
    }

    /// `(x - y) ^ rot(y, k)`: a `mix` line's first update.
    fn sub_xor_rot(&mut self, x: &U, y: &U, k: u32) -> U {
        self.op(
            x,
            y,
            move |a, b| a.wrapping_sub(b) ^ b.rotate_left(k),
            move |a, b| format!("bitXor(toUInt32({a} - {b}), bitRotateLeft({b}, {k}))"),
        )
    }

    /// `(x ^ y) - rot(y, k)`: a `final` line.
    fn xor_sub_rot(&mut self, x: &U, y: &U, k: u32) -> U {
        self.op(
            x,
            y,
            move |a, b| (a ^ b).wrapping_sub(b.rotate_left(k)),
            move |a, b| format!("toUInt32(bitXor({a}, {b}) - bitRotateLeft({b}, {k}))"),
        )
    }

    /// lookup3's `mix`.
    pub fn mix(&mut self, s: State) -> State {
        let [mut a, mut b, mut c] = s;
        for (k1, k2, k3) in [(4, 6, 8), (16, 19, 4)] {
            let a2 = self.sub_xor_rot(&a, &c, k1);
            c = self.add(&c, &b);
            a = a2;
            let b2 = self.sub_xor_rot(&b, &a, k2);
            a = self.add(&a, &c);
            b = b2;
            let c2 = self.sub_xor_rot(&c, &b, k3);
            b = self.add(&b, &a);
            c = c2;
        }
        [a, b, c]
    }

    /// lookup3's `final`, and its 64-bit result (`b << 32 | c`): the name
    /// of a UInt64 column.
    pub fn final_(&mut self, s: State) -> String {
        let [mut a, mut b, mut c] = s;
        c = self.xor_sub_rot(&c, &b, 14);
        a = self.xor_sub_rot(&a, &c, 11);
        b = self.xor_sub_rot(&b, &a, 25);
        c = self.xor_sub_rot(&c, &b, 16);
        a = self.xor_sub_rot(&a, &c, 4);
        b = self.xor_sub_rot(&b, &a, 14);
        c = self.xor_sub_rot(&c, &b, 24);
        let _ = a;
        let deps: Vec<&str> = [b.name(), c.name()].into_iter().flatten().collect();
        self.let_(format!("bitOr(bitShiftLeft(toUInt64({}), 32), {})", b.sql(), c.sql()), &deps)
    }

    /// `hash_bytes_uint32_extended(k, seed)` of the UInt32 column `k`.
    pub fn hash_u32(&mut self, k: &U, seed: u64) -> String {
        let (a, b, c) = canon::initial_state(4, seed);
        let a = self.add(&U::C(a), k);
        self.final_([a, U::C(b), U::C(c)])
    }

    /// [`canon::mix64`] of the UInt64 column `x`: a UInt64 column.
    pub fn mix64(&mut self, x: &str, seeds: (u64, u64)) -> String {
        let hi = U::N(self.let_(format!("toUInt32(bitShiftRight({x}, 32))"), &[x]));
        let lo = U::N(self.let_(format!("toUInt32(bitAnd({x}, 4294967295))"), &[x]));
        let (h, l) = (self.hash_u32(&hi, seeds.0), self.hash_u32(&lo, seeds.1));
        self.let_(format!("bitXor({h}, {l})"), &[&h, &l])
    }

    /// The column `x` (UInt32) selected when `cond` holds, else `y`.
    pub fn pick(&mut self, cond: &str, x: &U, y: &U) -> U {
        let deps: Vec<&str> = [Some(cond), x.name(), y.name()].into_iter().flatten().collect();
        U::N(self.let_(format!("if({cond}, {}, {})", x.sql(), y.sql()), &deps))
    }

    /// The state after `mix` of `state` plus the words of each 12-byte block
    /// `i` of `range` of the string column `v`, in one `arrayFold` (a tuple
    /// column; its elements follow as three steps).
    pub fn fold_mix(&mut self, v: &str, range: &str, range_deps: &[&str], state: State, tag: usize) -> State {
        let word = |n: u32| format!("reinterpretAsUInt32(substring({v}, 12 * i + {}, 4))", 4 * n + 1);
        let mut defs = Vec::new();
        let mut k = 0;
        let mut alias = |e: String| {
            k += 1;
            let name = format!("_f{tag}_{k}");
            defs.push(format!("{e} AS {name}"));
            name
        };
        let mut a = alias(format!("toUInt32(acc.1 + {})", word(0)));
        let mut b = alias(format!("toUInt32(acc.2 + {})", word(1)));
        let mut c = alias(format!("toUInt32(acc.3 + {})", word(2)));
        for (k1, k2, k3) in [(4, 6, 8), (16, 19, 4)] {
            let a2 = alias(format!("bitXor(toUInt32({a} - {c}), bitRotateLeft({c}, {k1}))"));
            c = alias(format!("toUInt32({c} + {b})"));
            a = a2;
            let b2 = alias(format!("bitXor(toUInt32({b} - {a}), bitRotateLeft({a}, {k2}))"));
            a = alias(format!("toUInt32({a} + {c})"));
            b = b2;
            let c2 = alias(format!("bitXor(toUInt32({c} - {b}), bitRotateLeft({b}, {k3}))"));
            b = alias(format!("toUInt32({b} + {a})"));
            c = c2;
        }
        let n = defs.len() + 1;
        let body = format!("tupleElement(tuple({}, tuple({a}, {b}, {c})), {n})", defs.join(", "));
        let mut deps: Vec<&str> = vec![v];
        deps.extend(range_deps);
        deps.extend(state.iter().filter_map(U::name));
        let st = self.let_(
            format!("arrayFold((acc, i) -> {body}, {range}, tuple({}, {}, {}))", state[0].sql(), state[1].sql(), state[2].sql()),
            &deps,
        );
        [1, 2, 3].map(|i| U::N(self.let_(format!("tupleElement({st}, {i})"), &[&st])))
    }

    /// The nested subqueries over `FROM {from}`: the innermost selects the
    /// source items, each layer above selects its steps and the columns
    /// later layers or `outputs` read. Returns the SQL whose columns include
    /// `outputs`.
    pub fn layers(&self, from: &str, outputs: &[&str]) -> String {
        let top = self.lets.iter().map(|l| l.layer).max().unwrap_or(0);
        let mut last_use: BTreeMap<&str, usize> = BTreeMap::new();
        for l in &self.lets {
            for d in &l.deps {
                let e = last_use.entry(d.as_str()).or_default();
                *e = (*e).max(l.layer);
            }
        }
        for o in outputs {
            last_use.insert(o, top + 1);
        }
        let items: Vec<String> = self.sources.iter().map(|(n, e)| format!("{e} AS {n}")).collect();
        let mut sql = format!("SELECT {} FROM {from}", if items.is_empty() { "1 AS _one".to_string() } else { items.join(", ") });
        let mut available: Vec<&str> = self.sources.iter().map(|(n, _)| n.as_str()).collect();
        for layer in 1..=top {
            let mut cols: Vec<String> =
                available.iter().filter(|n| last_use.get(**n).is_some_and(|&u| u > layer)).map(|n| n.to_string()).collect();
            let new: Vec<&Let> = self.lets.iter().filter(|l| l.layer == layer).collect();
            cols.extend(new.iter().map(|l| format!("{} AS {}", l.expr, l.name)));
            available.retain(|n| last_use.get(*n).is_some_and(|&u| u > layer));
            available.extend(new.iter().map(|l| l.name.as_str()));
            sql = format!("SELECT {} FROM ({sql})", cols.join(", "));
        }
        sql
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_inputs_fold_and_a_u32_key_costs_one_final() {
        let mut p = Program::default();
        let m = p.mix([U::C(1), U::C(2), U::C(3)]);
        let (a, b, c) = canon::mix((1, 2, 3));
        assert_eq!(m, [U::C(a), U::C(b), U::C(c)]);
        assert!(p.lets.is_empty(), "nothing to compute at run time");
        let k = U::N(p.source("toUInt32(x)".into()));
        let h = p.hash_u32(&k, canon::seed(0, 1));
        // a = a0 + k, then seven final lines (c's first line is a constant
        // after folding: it reads only b and c), then the result.
        assert!(p.lets.len() <= 9, "{:#?}", p.lets);
        let sql = p.layers("t", &[&h]);
        assert!(sql.contains(&format!("AS {h}")), "{sql}");
        assert!(sql.ends_with(&format!("FROM t{}", ")".repeat(8))), "one subquery per dependent step: {sql}");
    }

    #[test]
    fn layers_pass_only_the_columns_later_layers_read() {
        let mut p = Program::default();
        let x = p.source("a".into());
        let y = p.source("b".into());
        let s = p.let_(format!("{x} + 1"), &[&x]);
        let t = p.let_(format!("{s} * {y}"), &[&s, &y]);
        let sql = p.layers("tbl WHERE 1", &[&t]);
        assert_eq!(
            sql,
            format!("SELECT {s} * {y} AS {t} FROM (SELECT {y}, {x} + 1 AS {s} FROM (SELECT a AS {x}, b AS {y} FROM tbl WHERE 1))")
        );
    }
}
