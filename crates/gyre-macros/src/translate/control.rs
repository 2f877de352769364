//! Control flow of a handler: `if` chains, `match` with its patterns, and `for` over a
//! range or an array.

use syn::spanned::Spanned;
use syn::{Expr, Pat, RangeLimits};

use super::{err, Result, Tail, Translator, Want};

impl Translator {
    pub(super) fn if_chain(&mut self, i: &syn::ExprIf, out: &mut String, tail: Tail) -> Result<()> {
        let c = self.expr(&i.cond, Want::None)?;
        let t = self.fresh("gyre_c");
        out.push_str("{\n");
        self.emit(out, format!("bool {t} = {c};\n"));
        out.push_str(&format!("if ({t}) {{\n"));
        self.block_body(&i.then_branch, out, tail.clone())?;
        out.push_str("} else {\n");
        match i.else_branch.as_ref().map(|(_, e)| &**e) {
            Some(Expr::If(inner)) => self.if_chain(inner, out, tail)?,
            Some(Expr::Block(b)) => self.block_body(&b.block, out, tail)?,
            Some(other) => return err(other.span(), "`else` takes a block or an `if`"),
            None => {
                if let Tail::Into(..) = tail {
                    return err(i.span(), "an `if` that gives a value needs an `else`");
                }
            }
        }
        out.push_str("}\n}\n");
        Ok(())
    }

    pub(super) fn match_expr(
        &mut self,
        m: &syn::ExprMatch,
        out: &mut String,
        tail: Tail,
    ) -> Result<()> {
        let s = self.expr(&m.expr, Want::None)?;
        let sv = self.fresh("gyre_m");
        out.push_str("{\n");
        self.emit(out, format!("GYRE_AUTO {sv} = {s};\n"));
        let want = Want::Ty(format!("GYRE_TYPEOF({sv})"));
        let mut first = true;
        for arm in &m.arms {
            if let Some((_, g)) = &arm.guard {
                return err(g.span(), "match guards are not in the handler subset");
            }
            self.scopes.push(Vec::new());
            let (cond, bind) = self.pattern(&arm.pat, &sv, &want)?;
            out.push_str(if first { "if (" } else { "else if (" });
            out.push_str(&cond);
            out.push_str(") {\n");
            first = false;
            if let Some(name) = bind {
                let c = self.bind(&name);
                out.push_str(&format!("GYRE_AUTO {c} = {sv};\n"));
            }
            match &*arm.body {
                Expr::Block(b) if b.label.is_none() => {
                    self.block_body(&b.block, out, tail.clone())?
                }
                e => self.tail_expr(e, out, &tail)?,
            }
            out.push_str("}\n");
            self.scopes.pop();
        }
        out.push_str("}\n");
        Ok(())
    }

    /// A match pattern on integers: the C condition on `sv`, and a name it binds.
    pub(super) fn pattern(
        &mut self,
        p: &Pat,
        sv: &str,
        want: &Want,
    ) -> Result<(String, Option<String>)> {
        Ok(match p {
            Pat::Wild(_) => ("1".into(), None),
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                self.not_the_lane(&pi.ident.to_string(), pi.span())?;
                ("1".into(), Some(pi.ident.to_string()))
            }
            Pat::Lit(l) => {
                let v = self.expr(&Expr::Lit(l.clone()), want.clone())?;
                (format!("{sv} == {v}"), None)
            }
            Pat::Range(r) => {
                let mut c = Vec::new();
                if let Some(lo) = &r.start {
                    c.push(format!("{sv} >= {}", self.expr(lo, want.clone())?));
                }
                if let Some(hi) = &r.end {
                    let op = match r.limits {
                        RangeLimits::Closed(_) => "<=",
                        RangeLimits::HalfOpen(_) => "<",
                    };
                    c.push(format!("{sv} {op} {}", self.expr(hi, want.clone())?));
                }
                (format!("({})", c.join(" && ")), None)
            }
            Pat::Or(o) => {
                let mut c = Vec::new();
                for case in &o.cases {
                    let (cc, b) = self.pattern(case, sv, want)?;
                    if b.is_some() {
                        return err(case.span(), "no bindings inside an or-pattern");
                    }
                    c.push(format!("({cc})"));
                }
                (c.join(" || "), None)
            }
            Pat::Paren(pp) => self.pattern(&pp.pat, sv, want)?,
            _ => return err(
                p.span(),
                "a handler `match` takes integer literals, ranges (`a..=b`), `|`, `_` and a name",
            ),
        })
    }

    pub(super) fn for_loop(&mut self, f: &syn::ExprForLoop, out: &mut String) -> Result<()> {
        if f.label.is_some() {
            return err(f.span(), "loop labels are not in the handler subset");
        }
        let name = match &*f.pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => pi.ident.to_string(),
            Pat::Wild(_) => "_".into(),
            p => return err(p.span(), "a `for` binds one name"),
        };
        self.not_the_lane(&name, f.pat.span())?;
        out.push_str("{\n");
        match &*f.expr {
            Expr::Range(r) => {
                let (Some(lo), Some(hi)) = (&r.start, &r.end) else {
                    return err(r.span(), "a `for` range has both ends (`a..b` or `a..=b`)");
                };
                let (lo_c, hi_c) = self.pair(lo, hi, Want::None, r.span())?;
                let (l, h, i) = (
                    self.fresh("gyre_lo"),
                    self.fresh("gyre_hi"),
                    self.fresh("gyre_i"),
                );
                self.emit(
                    out,
                    format!("GYRE_AUTO {l} = {lo_c};\nGYRE_AUTO {h} = {hi_c};\n"),
                );
                match r.limits {
                    RangeLimits::HalfOpen(_) => {
                        out.push_str(&format!(
                            "for (GYRE_TYPEOF({l}) {i} = {l}; {i} < {h}; {i} = (GYRE_TYPEOF({l}))({i} + 1)) {{\n"
                        ));
                    }
                    RangeLimits::Closed(_) => {
                        // Ends at `hi` even when `hi` is the type's MAX.
                        let last = self.fresh("gyre_last");
                        out.push_str(&format!(
                            "bool {last} = !({l} <= {h});\nfor (GYRE_TYPEOF({l}) {i} = {l}; !{last}; {i} = (GYRE_TYPEOF({l}))({i} + ({last} ? 0 : 1))) {{\n{last} = {i} == {h};\n"
                        ));
                    }
                }
                self.scopes.push(Vec::new());
                let c = self.bind(&name);
                out.push_str(&format!("GYRE_AUTO {c} = {i};\n{{\n"));
                self.block_body(&f.body, out, Tail::Discard)?;
                out.push_str("}\n}\n");
                self.scopes.pop();
            }
            e => {
                // An array, by value (Rust 2021's `IntoIterator for [T; N]`).
                let a = self.expr(e, Want::None)?;
                let (av, k) = (self.fresh("gyre_a"), self.fresh("gyre_k"));
                self.emit(out, format!("GYRE_AUTO {av} = {a};\n"));
                out.push_str(&format!(
                    "for (uint64_t {k} = 0u; {k} < GYRE_LEN({av}); ++{k}) {{\n"
                ));
                self.scopes.push(Vec::new());
                let c = self.bind(&name);
                out.push_str(&format!("GYRE_AUTO {c} = {av}.v[{k}];\n{{\n"));
                self.block_body(&f.body, out, Tail::Discard)?;
                out.push_str("}\n}\n");
                self.scopes.pop();
            }
        }
        out.push_str("}\n");
        Ok(())
    }
}
