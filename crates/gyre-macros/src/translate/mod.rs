//! Rust (the handler subset of `docs/handlers.md`) to C over `gyre/portable.h`.
//!
//! The translator walks the function's syntax once. It needs no type inference: every
//! operator whose C meaning differs from Rust's is an overloaded helper of
//! `gyre/portable.h`, and the few places that need a type name it (a `let` annotation,
//! the function signature, `GYRE_TYPEOF` of a sibling operand for an unsuffixed literal).
//! Where Rust would infer a type from a later use, the subset asks for an annotation or a
//! suffix instead (a compile error naming the fix).
//!
//! Types are written as placeholders (`\x01T<n>\x02`): the Rust type is recorded and the
//! runtime replaces the placeholder with `<T as DeviceType>::c_name()`, so the C of a
//! user's struct comes from its `#[derive(DeviceType)]`. Calls to `#[gyre::handler_fn]`
//! helpers are placeholders too (`\x01F<n>\x02`), resolved to the helper's C name.
//!
//! Runtime "panics" (integer division by zero, an index past the end, a panicking
//! helper) set `*gyre_p`; the statement that can cause one is followed by
//! `if (*gyre_p) return gyre_zero;`, so the function stops there as Rust would.
//!
//! This file: the translator, the function, blocks and statements; `control` (`if`,
//! `match`, `for`), `expr` (expressions), `syntax` (what a piece of syntax is).

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Block, Expr, ExprLit, Lit, Pat, Path, ReturnType, Stmt, Type};

mod control;
mod expr;
mod syntax;

pub(crate) use syntax::c_field;
use syntax::*;

type Result<T> = syn::Result<T>;

fn err<T>(span: Span, msg: impl std::fmt::Display) -> Result<T> {
    Err(syn::Error::new(span, msg))
}

/// The methods a handler may call, and their arity (besides the receiver).
const METHODS: &[(&str, usize)] = &[
    ("wrapping_add", 1),
    ("wrapping_sub", 1),
    ("wrapping_mul", 1),
    ("wrapping_neg", 0),
    ("min", 1),
    ("max", 1),
    ("abs", 0),
    ("sqrt", 0),
    ("floor", 0),
    ("ceil", 0),
    ("trunc", 0),
    ("round", 0),
    ("mul_add", 2),
    ("exp", 0),
    ("exp2", 0),
    ("ln", 0),
    ("log2", 0),
    ("log10", 0),
    ("sin", 0),
    ("cos", 0),
    ("tan", 0),
    ("tanh", 0),
    ("powf", 1),
];

/// The arity of a supported method, or `None`.
pub(crate) fn method_arity(name: &str) -> Option<usize> {
    METHODS.iter().find(|(n, _)| *n == name).map(|(_, a)| *a)
}

/// What the subset allows, for error messages.
const ALLOWED_EXPR: &str = "a handler expression is a literal, a local or parameter, a field \
    (`a.b`), an index (`a[i]`), arithmetic, comparison, logic or bit operators, `as` between \
    numeric types, a call of a #[gyre::handler_fn], a method of docs/handlers.md, `T::MAX`-style \
    constants, or `if c { a } else { b }`";

/// The type a literal should take where Rust would infer it from the context.
#[derive(Clone, Debug)]
enum Want {
    /// No type known: an unsuffixed literal is an error.
    None,
    /// This C type (text, possibly `GYRE_TYPEOF(..)`).
    Ty(String),
    /// Rust's fallback: `i32` for an integer literal, `f64` for a float one (the operand of
    /// `as`, which does not constrain it).
    Fallback,
}

/// One translated function.
pub(crate) struct Translator {
    /// Rust types named by placeholders `\x01T<n>\x02`.
    pub(crate) types: Vec<Type>,
    /// Helper functions named by placeholders `\x01F<n>\x02` (their paths).
    pub(crate) fns: Vec<Path>,
    /// Rust name -> C name, innermost scope last.
    scopes: Vec<Vec<(String, String)>>,
    next: usize,
    /// The function's own name (a call of it is recursion, which OpenCL forbids).
    own: String,
    /// The function's return type placeholder.
    ret: String,
    /// A lane-parallel handler's `Lane` parameter.
    lane: Option<String>,
    /// A loan handler's `Bytes` parameter (the block: C `gyre_b`, `gyre_b_len`,
    /// `gyre_b_cap`).
    bytes: Option<String>,
    /// The tail `lane.sum(..)` / `min` / `max` of a lane-parallel handler (its address),
    /// the one place a reduction may appear.
    tail_reduce: Option<usize>,
    /// The reduction the tail names: `Sum`, `Min` or `Max`.
    pub(crate) reduce: Option<&'static str>,
    /// A loan handler (`#[gyre::handler(loan)]`): its `Lane`, if any, has no reductions.
    loan: bool,
}

impl Translator {
    pub(crate) fn new(own: &str) -> Self {
        Self {
            types: Vec::new(),
            fns: Vec::new(),
            scopes: vec![Vec::new()],
            next: 0,
            own: own.to_owned(),
            ret: String::new(),
            lane: None,
            bytes: None,
            tail_reduce: None,
            reduce: None,
            loan: false,
        }
    }

    /// The placeholder of type `t` (recorded once per spelling).
    pub(crate) fn ty(&mut self, t: &Type) -> Result<String> {
        match t {
            Type::Path(p) if p.qself.is_none() => {}
            Type::Array(a) => {
                if let Expr::Lit(ExprLit {
                    lit: Lit::Int(n), ..
                }) = &a.len
                {
                    if n.base10_parse::<u128>().ok() == Some(0) {
                        return err(
                            a.span(),
                            "C has no zero-length arrays: `[T; 0]` is not in the handler subset",
                        );
                    }
                }
                self.ty(&a.elem)?;
            }
            Type::Paren(p) => return self.ty(&p.elem),
            Type::Group(g) => return self.ty(&g.elem),
            _ => {
                return err(
                    t.span(),
                    "a handler type is a scalar (u8..u64, i8..i64, f32, f64, bool, usize), an \
                     array `[T; N]` of them, or a struct deriving gyre::DeviceType",
                )
            }
        }
        let key = quote::quote!(#t).to_string();
        let i = match self
            .types
            .iter()
            .position(|x| quote::quote!(#x).to_string() == key)
        {
            Some(i) => i,
            None => {
                self.types.push(t.clone());
                self.types.len() - 1
            }
        };
        Ok(format!("\u{1}T{i}\u{2}"))
    }

    fn scalar_ty(&mut self, name: &str) -> String {
        let t: Type = syn::parse_str(name).expect("a scalar type name parses");
        self.ty(&t).expect("a scalar type is a handler type")
    }

    /// Whether `e` names the lane-parallel handler's `Lane` parameter.
    fn is_lane(&self, e: &Expr) -> bool {
        match (e, &self.lane) {
            (Expr::Path(p), Some(l)) => p.qself.is_none() && p.path.is_ident(l.as_str()),
            _ => false,
        }
    }

    fn fresh(&mut self, base: &str) -> String {
        self.next += 1;
        format!("{base}_{}", self.next)
    }

    fn bind(&mut self, rust: &str) -> String {
        let c = self.fresh(rust.trim_start_matches("r#"));
        if let Some(s) = self.scopes.last_mut() {
            s.push((rust.to_owned(), c.clone()));
        }
        c
    }

    /// Whether `e` names the loan handler's `Bytes` parameter.
    fn is_bytes(&self, e: &Expr) -> bool {
        match (e, &self.bytes) {
            (Expr::Path(p), Some(b)) => p.qself.is_none() && p.path.is_ident(b.as_str()),
            _ => false,
        }
    }

    /// A lane-parallel handler's `Lane` parameter may not be shadowed: its last
    /// expression would then name a local, not the block reduction. Nor may a loan
    /// handler's `Bytes` (its methods are translated by name).
    fn not_the_lane(&self, name: &str, span: Span) -> Result<()> {
        if self.lane.as_deref() == Some(name) {
            return err(
                span,
                format!("`{name}` is this handler's `Lane`: bind another name"),
            );
        }
        if self.bytes.as_deref() == Some(name) {
            return err(
                span,
                format!("`{name}` is this handler's `Bytes`: bind another name"),
            );
        }
        Ok(())
    }

    fn lookup(&self, rust: &str) -> Option<&str> {
        self.scopes
            .iter()
            .rev()
            .flat_map(|s| s.iter().rev())
            .find(|(r, _)| r == rust)
            .map(|(_, c)| c.as_str())
    }

    /// The C function: `static GYRE_DEVICE_FN RET name(PARAMS, uint32_t *gyre_p) { .. }`.
    pub(crate) fn function(
        &mut self,
        c_name: &str,
        f: &syn::ItemFn,
        kind: crate::Kind,
    ) -> Result<String> {
        let sig = &f.sig;
        self.loan = kind == crate::Kind::Loan;
        if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
            return err(sig.generics.span(), "a handler cannot be generic");
        }
        if sig.asyncness.is_some() || sig.unsafety.is_some() || sig.variadic.is_some() {
            return err(sig.span(), "a handler is a plain `fn`");
        }
        let ret = match &sig.output {
            ReturnType::Type(_, t) => self.ty(t)?,
            ReturnType::Default => return err(sig.span(), "a handler returns a value: add `-> T`"),
        };
        self.ret = ret.clone();
        let mut params = Vec::new();
        for (k, input) in sig.inputs.iter().enumerate() {
            let syn::FnArg::Typed(pt) = input else {
                return err(input.span(), "a handler takes no `self`");
            };
            let Pat::Ident(pi) = &*pt.pat else {
                return err(pt.pat.span(), "a handler parameter is a plain name");
            };
            if pi.by_ref.is_some() || pi.subpat.is_some() {
                return err(pt.pat.span(), "a handler parameter is a plain name");
            }
            if matches!(kind, crate::Kind::Lanes | crate::Kind::Loan) && k == 1 {
                let is_lane = matches!(&*pt.ty, Type::Path(tp) if tp.path.segments.last().is_some_and(|s| s.ident == "Lane"));
                if !is_lane {
                    return err(
                        pt.ty.span(),
                        "the second parameter of a lane-parallel handler is its `gyre::portable::Lane`",
                    );
                }
                self.lane = Some(pi.ident.to_string());
                params.push("uint32_t gyre_lane_id, uint32_t gyre_lanes".into());
                continue;
            }
            if kind == crate::Kind::Loan {
                let is_bytes = matches!(&*pt.ty, Type::Path(tp) if tp.path.segments.last().is_some_and(|s| s.ident == "Bytes"));
                if !is_bytes || k != 0 {
                    return err(
                        pt.ty.span(),
                        "a loan handler takes its block, `fn f(b: gyre::portable::Bytes) -> u32` \
                         (the reply's length), or its block and its lane, \
                         `fn f(b: gyre::portable::Bytes, lane: gyre::portable::Lane) -> u32`",
                    );
                }
                self.bytes = Some(pi.ident.to_string());
                params.push(
                    "GYRE_GLOBAL unsigned char *gyre_b, uint32_t gyre_b_len, uint32_t gyre_b_cap"
                        .into(),
                );
                continue;
            }
            let t = self.ty(&pt.ty)?;
            let c = self.bind(&pi.ident.to_string());
            params.push(format!("{t} {c}"));
        }
        if kind == crate::Kind::Lanes {
            let tail = match f.block.stmts.last() {
                Some(Stmt::Expr(Expr::MethodCall(m), None))
                    if self.is_lane(&m.receiver)
                        && matches!(m.method.to_string().as_str(), "sum" | "min" | "max") =>
                {
                    m
                }
                _ => {
                    return err(
                        f.block.span(),
                        "a lane-parallel handler ends in its block reduction: `lane.sum(x)`, \
                         `lane.min(x)` or `lane.max(x)` (x: u32, i32 or f32)",
                    )
                }
            };
            self.tail_reduce = Some(tail as *const syn::ExprMethodCall as usize);
        }
        params.push("uint32_t *gyre_p".into());
        // A helper called with arguments whose evaluation panicked returns at once (Rust
        // would not have called it).
        let mut out = format!(
            "static GYRE_DEVICE_FN {ret} {c_name}({}) {{\n{ret} gyre_zero;\ngyre_zero_bytes((unsigned char *)&gyre_zero, (uint32_t)sizeof(gyre_zero));\nif (*gyre_p) return gyre_zero;\n",
            params.join(", ")
        );
        self.block_body(&f.block, &mut out, Tail::Return)?;
        out.push_str("return gyre_zero;\n}\n");
        Ok(out)
    }

    /// The statements of `b`; its tail expression goes to `tail`.
    fn block_body(&mut self, b: &Block, out: &mut String, tail: Tail) -> Result<()> {
        self.scopes.push(Vec::new());
        let n = b.stmts.len();
        for (k, s) in b.stmts.iter().enumerate() {
            let last = k + 1 == n;
            match s {
                Stmt::Expr(e, None) if last => self.tail_expr(e, out, &tail)?,
                Stmt::Expr(e, None) if is_block_like(e) => self.stmt_expr(e, out)?,
                Stmt::Expr(e, None) => {
                    return err(e.span(), "only the last expression of a block has no `;`")
                }
                Stmt::Expr(e, Some(_)) => self.stmt_expr(e, out)?,
                Stmt::Local(l) => self.local(l, out)?,
                Stmt::Item(i) => {
                    return err(i.span(), "no items inside a handler: declare them outside")
                }
                Stmt::Macro(m) => {
                    return err(
                        m.span(),
                        "no macros inside a handler (assert!, println!, ...): they do not run on a device",
                    )
                }
            }
        }
        let diverges = matches!(
            b.stmts.last(),
            Some(Stmt::Expr(
                Expr::Return(_) | Expr::Break(_) | Expr::Continue(_),
                _
            ))
        );
        if !diverges
            && (n == 0
                || matches!(
                    b.stmts.last(),
                    Some(Stmt::Expr(_, Some(_))) | Some(Stmt::Local(_))
                ))
        {
            if let Tail::Into(..) = tail {
                return err(b.span(), "this block must end in a value");
            }
        }
        self.scopes.pop();
        Ok(())
    }

    /// The value of a block, an `if` branch or a match arm: returned, stored or dropped.
    fn tail_expr(&mut self, e: &Expr, out: &mut String, tail: &Tail) -> Result<()> {
        // `loop { .. return .. }` ends a function without a value: it diverges.
        if matches!(e, Expr::Loop(_) | Expr::While(_) | Expr::ForLoop(_)) {
            return self.stmt_expr(e, out);
        }
        match tail {
            Tail::Return => {
                let ret = self.ret.clone();
                self.init_into("gyre_ret", &ret, e, out, true)?;
            }
            Tail::Into(target, ty) => {
                let (target, ty) = (target.clone(), ty.clone());
                self.init_into(&target, &ty, e, out, false)?;
            }
            Tail::Discard => self.stmt_expr(e, out)?,
        }
        Ok(())
    }

    /// Stores the value of `e` in the C lvalue `target` of C type `ty`; struct and array
    /// literals, `if` and `match` with blocks are allowed here. With `ret`, `target` is
    /// declared and returned.
    fn init_into(
        &mut self,
        target: &str,
        ty: &str,
        e: &Expr,
        out: &mut String,
        ret: bool,
    ) -> Result<()> {
        if ret {
            out.push_str(&format!("{{\n{ty} gyre_ret;\n"));
        }
        match e {
            Expr::Struct(s) => {
                if s.rest.is_some() || s.qself.is_some() {
                    return err(s.span(), "a struct literal names every field (no `..base`)");
                }
                for f in &s.fields {
                    let syn::Member::Named(name) = &f.member else {
                        return err(f.span(), "tuple structs are not in the handler subset");
                    };
                    let lv = format!("{target}.{}", c_field(&name.to_string()));
                    self.init_into(&lv, &format!("GYRE_TYPEOF({lv})"), &f.expr, out, false)?;
                }
            }
            Expr::Array(a) => {
                for (k, el) in a.elems.iter().enumerate() {
                    let lv = format!("{target}.v[{k}]");
                    self.init_into(&lv, &format!("GYRE_TYPEOF({lv})"), el, out, false)?;
                }
            }
            Expr::Repeat(r) => {
                let v = self.expr(&r.expr, Want::Ty(format!("GYRE_TYPEOF({target}.v[0])")))?;
                let k = self.fresh("gyre_k");
                self.emit(
                    out,
                    format!(
                        "{{ GYRE_AUTO gyre_v = {v};\nfor (uint64_t {k} = 0u; {k} < GYRE_LEN({target}); ++{k}) {{ {target}.v[{k}] = gyre_v; }} }}\n"
                    ),
                );
            }
            Expr::If(i) if i.else_branch.is_some() => {
                self.if_chain(i, out, Tail::Into(target.to_owned(), ty.to_owned()))?;
            }
            Expr::If(i) => return err(i.span(), "an `if` that gives a value needs an `else`"),
            Expr::Match(m) => {
                self.match_expr(m, out, Tail::Into(target.to_owned(), ty.to_owned()))?
            }
            Expr::Block(b) if b.label.is_none() => {
                out.push_str("{\n");
                self.block_body(&b.block, out, Tail::Into(target.to_owned(), ty.to_owned()))?;
                out.push_str("}\n");
            }
            Expr::Paren(p) => self.init_into(target, ty, &p.expr, out, false)?,
            Expr::Return(_) | Expr::Break(_) | Expr::Continue(_) => {
                self.stmt_expr(e, out)?;
            }
            _ => {
                let v = self.expr(e, Want::Ty(ty.to_owned()))?;
                self.emit(out, format!("{target} = {v};\n"));
            }
        }
        if ret {
            out.push_str("return gyre_ret;\n}\n");
        }
        Ok(())
    }

    /// Appends a C statement, followed by the panic check where it can panic.
    fn emit(&mut self, out: &mut String, stmt: String) {
        let can_panic = stmt.contains("gyre_p");
        out.push_str(&stmt);
        if can_panic {
            out.push_str("if (*gyre_p) return gyre_zero;\n");
        }
    }

    fn local(&mut self, l: &syn::Local, out: &mut String) -> Result<()> {
        let (pat, ty) = match &l.pat {
            Pat::Type(pt) => (&*pt.pat, Some(&*pt.ty)),
            p => (p, None),
        };
        let name = match pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => pi.ident.to_string(),
            Pat::Wild(_) => "_".into(),
            _ => {
                return err(
                    pat.span(),
                    "a `let` binds one name (`let x` or `let mut x`)",
                )
            }
        };
        self.not_the_lane(&name, pat.span())?;
        let Some(init) = &l.init else {
            return err(
                l.span(),
                "a `let` in a handler has a value (`let x: T = ...;`)",
            );
        };
        if let Some((_, d)) = &init.diverge {
            return err(d.span(), "`let ... else` is not in the handler subset");
        }
        let e = &*init.expr;
        let cty = match ty {
            Some(t) => Some(self.ty(t)?),
            // A struct literal names its type.
            None => match unparen(e) {
                Expr::Struct(s) => Some(self.ty(&Type::Path(syn::TypePath {
                    qself: None,
                    path: s.path.clone(),
                }))?),
                _ => None,
            },
        };
        match cty {
            Some(cty) => {
                // Evaluate before binding: `let x = x + 1` reads the outer x.
                let tmp = self.fresh("gyre_t");
                out.push_str(&format!("{cty} {tmp};\n"));
                self.init_into(&tmp, &cty, e, out, false)?;
                let c = self.bind(&name);
                out.push_str(&format!("{cty} {c} = {tmp};\n"));
            }
            None => {
                if let Some(arm) = typing_arm(e) {
                    // A `match` whose arms Rust types alike: one arm's type, in C.
                    let ty = format!("GYRE_TYPEOF({})", self.expr(arm, Want::None)?);
                    let tmp = self.fresh("gyre_t");
                    out.push_str(&format!("{ty} {tmp};\n"));
                    self.init_into(&tmp, &ty, e, out, false)?;
                    let c = self.bind(&name);
                    out.push_str(&format!("GYRE_TYPEOF({tmp}) {c} = {tmp};\n"));
                    return Ok(());
                }
                if needs_type(e) {
                    return err(
                        l.span(),
                        format!(
                            "give `{name}` a type (`let {name}: T = ...`): gyre does not infer \
                             a type from later uses"
                        ),
                    );
                }
                let v = self.expr(e, Want::None)?;
                let c = self.bind(&name);
                self.emit(out, format!("GYRE_AUTO {c} = {v};\n"));
            }
        }
        Ok(())
    }

    /// An expression in statement position (its value, if any, is dropped).
    fn stmt_expr(&mut self, e: &Expr, out: &mut String) -> Result<()> {
        match e {
            Expr::Assign(a) => {
                let lv = self.place(&a.left)?;
                let ty = format!("GYRE_TYPEOF({lv})");
                if needs_type(unparen(&a.right))
                    || matches!(unparen(&a.right), Expr::Struct(_) | Expr::If(_))
                {
                    // Rust evaluates the whole value before it assigns (`p = P { x: p.y,
                    // y: p.x }`): build it in a temporary.
                    let tmp = self.fresh("gyre_t");
                    out.push_str(&format!("{{\n{ty} {tmp};\n"));
                    self.init_into(&tmp, &ty, &a.right, out, false)?;
                    out.push_str(&format!("{lv} = {tmp};\n}}\n"));
                    Ok(())
                } else {
                    self.init_into(&lv, &ty, &a.right, out, false)
                }
            }
            Expr::Binary(b) if compound(&b.op).is_some() => {
                let lv = self.place(&b.left)?;
                let op = compound(&b.op).unwrap_or_default();
                let v = self.binary_c(op, lv.clone(), &b.right, &b.op)?;
                self.emit(out, format!("{lv} = {v};\n"));
                Ok(())
            }
            Expr::If(i) => self.if_chain(i, out, Tail::Discard),
            Expr::Match(m) => self.match_expr(m, out, Tail::Discard),
            Expr::While(w) => {
                if w.label.is_some() {
                    return err(w.span(), "loop labels are not in the handler subset");
                }
                let c = self.expr(&w.cond, Want::None)?;
                let t = self.fresh("gyre_c");
                out.push_str("for (;;) {\n");
                self.emit(out, format!("bool {t} = {c};\n"));
                out.push_str(&format!("if (!{t}) break;\n{{\n"));
                self.block_body(&w.body, out, Tail::Discard)?;
                out.push_str("}\n}\n");
                Ok(())
            }
            Expr::Loop(l) => {
                if l.label.is_some() {
                    return err(l.span(), "loop labels are not in the handler subset");
                }
                out.push_str("for (;;) {\n");
                self.block_body(&l.body, out, Tail::Discard)?;
                out.push_str("}\n");
                Ok(())
            }
            Expr::ForLoop(f) => self.for_loop(f, out),
            Expr::Block(b) if b.label.is_none() => {
                out.push_str("{\n");
                self.block_body(&b.block, out, Tail::Discard)?;
                out.push_str("}\n");
                Ok(())
            }
            Expr::Return(r) => match &r.expr {
                Some(v) => {
                    let ret = self.ret.clone();
                    self.init_into("gyre_ret", &ret, v, out, true)
                }
                None => err(r.span(), "a handler returns a value: `return v`"),
            },
            Expr::Break(b) => {
                if b.label.is_some() || b.expr.is_some() {
                    return err(b.span(), "`break` takes no label or value in a handler");
                }
                out.push_str("break;\n");
                Ok(())
            }
            Expr::Continue(c) => {
                if c.label.is_some() {
                    return err(c.span(), "`continue` takes no label in a handler");
                }
                out.push_str("continue;\n");
                Ok(())
            }
            Expr::MethodCall(m)
                if self.is_bytes(&m.receiver) && m.method == "set" && m.args.len() == 2 =>
            {
                let (u32_ty, u8_ty) = (self.scalar_ty("u32"), self.scalar_ty("u8"));
                let i = self.expr(&m.args[0], Want::Ty(u32_ty))?;
                let v = self.expr(&m.args[1], Want::Ty(u8_ty))?;
                self.emit(
                    out,
                    format!("(void)gyre_bytes_set(gyre_b, gyre_b_cap, {i}, {v}, gyre_p);\n"),
                );
                Ok(())
            }
            _ => {
                let v = self.expr(e, Want::None)?;
                self.emit(out, format!("(void)({v});\n"));
                Ok(())
            }
        }
    }

    /// A C lvalue for an assignment target: a local, a field or an index of one.
    fn place(&mut self, e: &Expr) -> Result<String> {
        match e {
            Expr::Path(_) | Expr::Field(_) | Expr::Index(_) => self.expr(e, Want::None),
            Expr::Paren(p) => self.place(&p.expr),
            _ => err(e.span(), "assign to a local, a field or an array element"),
        }
    }
}
