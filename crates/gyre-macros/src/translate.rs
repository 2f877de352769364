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

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{BinOp, Block, Expr, ExprLit, Lit, Pat, Path, RangeLimits, ReturnType, Stmt, Type, UnOp};

use crate::literal;

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
                        "the second parameter of a lane-parallel handler is its `gyre::Lane`",
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
                        "a loan handler takes its block, `fn f(b: gyre::Bytes) -> u32` \
                         (the reply's length), or its block and its lane, \
                         `fn f(b: gyre::Bytes, lane: gyre::Lane) -> u32`",
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

    fn if_chain(&mut self, i: &syn::ExprIf, out: &mut String, tail: Tail) -> Result<()> {
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

    fn match_expr(&mut self, m: &syn::ExprMatch, out: &mut String, tail: Tail) -> Result<()> {
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
    fn pattern(&mut self, p: &Pat, sv: &str, want: &Want) -> Result<(String, Option<String>)> {
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

    fn for_loop(&mut self, f: &syn::ExprForLoop, out: &mut String) -> Result<()> {
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

    /// Two operands of one type: an unsuffixed literal takes the other's type.
    fn pair(&mut self, a: &Expr, b: &Expr, want: Want, span: Span) -> Result<(String, String)> {
        match (untyped(a), untyped(b)) {
            (true, false) => {
                let bc = self.expr(b, want)?;
                let ac = self.expr(a, Want::Ty(format!("GYRE_TYPEOF({bc})")))?;
                Ok((ac, bc))
            }
            (false, true) => {
                let ac = self.expr(a, want)?;
                let bc = self.expr(b, Want::Ty(format!("GYRE_TYPEOF({ac})")))?;
                Ok((ac, bc))
            }
            (false, false) => Ok((self.expr(a, want.clone())?, self.expr(b, want)?)),
            (true, true) => match want {
                Want::None => err(
                    span,
                    "two unsuffixed literals: give one a suffix (`1u32`) so the type is known",
                ),
                w => Ok((self.expr(a, w.clone())?, self.expr(b, w)?)),
            },
        }
    }

    /// `lhs op rhs` where `lhs` is already C text (a compound assignment's place).
    fn binary_c(&mut self, op: &str, lhs: String, rhs: &Expr, bop: &BinOp) -> Result<String> {
        let r = match bop {
            BinOp::Shl(_) | BinOp::Shr(_) | BinOp::ShlAssign(_) | BinOp::ShrAssign(_) => {
                let u32_t = self.scalar_ty("u32");
                self.expr(rhs, Want::Ty(u32_t))?
            }
            _ => self.expr(rhs, Want::Ty(format!("GYRE_TYPEOF({lhs})")))?,
        };
        Ok(helper_call(op, &lhs, &r))
    }

    /// An expression as C text.
    fn expr(&mut self, e: &Expr, want: Want) -> Result<String> {
        Ok(match e {
            Expr::Lit(l) => self.lit(l, &want)?,
            Expr::Paren(p) => format!("({})", self.expr(&p.expr, want)?),
            Expr::Group(g) => self.expr(&g.expr, want)?,
            Expr::Path(p) => self.path_value(&p.path, p.qself.is_some())?,
            Expr::Field(f) => {
                let base = self.expr(&f.base, Want::None)?;
                match &f.member {
                    syn::Member::Named(n) => format!("({base}).{}", c_field(&n.to_string())),
                    syn::Member::Unnamed(_) => {
                        return err(f.span(), "tuples are not in the handler subset")
                    }
                }
            }
            Expr::Index(i) => {
                let base = self.expr(&i.expr, Want::None)?;
                let usize_t = self.scalar_ty("usize");
                let idx = self.expr(&i.index, Want::Ty(usize_t))?;
                format!("({base}).v[gyre_idx({idx}, GYRE_LEN({base}), gyre_p)]")
            }
            Expr::Unary(u) => {
                let v = self.expr(&u.expr, want)?;
                match u.op {
                    UnOp::Neg(_) => format!("gyre_neg({v})"),
                    UnOp::Not(_) => format!("gyre_not({v})"),
                    _ => return err(u.span(), "no references or `*` in a handler"),
                }
            }
            Expr::Binary(b) => self.binary(b, want)?,
            Expr::Cast(c) => {
                let name = scalar_name(&c.ty).ok_or_else(|| {
                    syn::Error::new(c.ty.span(), "`as` converts between numeric types only")
                })?;
                if name == "bool" {
                    return err(c.ty.span(), "`as bool` is not Rust");
                }
                // Rust types an unsuffixed literal by the cast's target when both are
                // integers or both floats (`3000000000 as u64`, `1.1 as f32`), else by the
                // fallback (`i32`, `f64`).
                let target = self.scalar_ty(&name);
                let want = match literal_kind(&c.expr) {
                    Some(LitKind::Int) if literal::is_int(&name) => Want::Ty(target),
                    Some(LitKind::Float) if name == "f32" || name == "f64" => Want::Ty(target),
                    _ => Want::Fallback,
                };
                let v = self.expr(&c.expr, want)?;
                let cname = literal::scalar_c(&name).unwrap_or("uint64_t");
                format!("gyre_as_{cname}({v})")
            }
            Expr::MethodCall(m) if self.is_bytes(&m.receiver) => {
                let u32_ty = self.scalar_ty("u32");
                match (m.method.to_string().as_str(), m.args.len()) {
                    ("len", 0) => "gyre_b_len".into(),
                    ("capacity", 0) => "gyre_b_cap".into(),
                    ("get", 1) => {
                        let i = self.expr(&m.args[0], Want::Ty(u32_ty))?;
                        format!("gyre_bytes_get(gyre_b, gyre_b_cap, {i}, gyre_p)")
                    }
                    ("set", 2) => {
                        return err(
                            m.span(),
                            "`set` gives no value: write `b.set(i, v);` as a statement",
                        )
                    }
                    _ => {
                        return err(
                            m.method.span(),
                            "a `Bytes` offers len(), capacity(), get(i) and set(i, v) \
                             (i: u32, v: u8)",
                        )
                    }
                }
            }
            Expr::MethodCall(m) if self.is_lane(&m.receiver) => {
                let name = m.method.to_string();
                match (name.as_str(), m.args.len()) {
                    ("id", 0) => "gyre_lane_id".into(),
                    ("count", 0) => "gyre_lanes".into(),
                    ("sum" | "min" | "max", 1)
                        if self.tail_reduce == Some(m as *const syn::ExprMethodCall as usize) =>
                    {
                        self.reduce = Some(match name.as_str() {
                            "sum" => "Sum",
                            "min" => "Min",
                            _ => "Max",
                        });
                        let arg = &m.args[0];
                        let ret = self.ret.clone();
                        let want = if matches!(want, Want::None) { Want::Ty(ret) } else { want };
                        self.expr(arg, want)?
                    }
                    ("sum" | "min" | "max", _) if self.loan => {
                        return err(
                            m.span(),
                            "a loan handler has no block reduction: each lane returns the \
                             reply's length, and lane 0's is used",
                        )
                    }
                    ("sum" | "min" | "max", _) => {
                        return err(
                            m.span(),
                            "a block reduction is the handler's last expression, and only there",
                        )
                    }
                    _ if self.loan => {
                        return err(m.method.span(), "a loan handler's `Lane` offers id() and count()")
                    }
                    _ => {
                        return err(
                            m.method.span(),
                            "a `Lane` offers id(), count(), and the block reductions sum(x), min(x), max(x)",
                        )
                    }
                }
            }
            Expr::MethodCall(m) => {
                if m.turbofish.is_some() {
                    return err(m.span(), "no turbofish in a handler");
                }
                let name = m.method.to_string();
                let recv = self.expr(&m.receiver, want)?;
                self.method(&name, recv, m.args.iter().collect(), m.method.span())?
            }
            Expr::Call(c) => self.call(c, want)?,
            Expr::If(i) => {
                // In expression position: single-expression branches only (a ternary).
                let Some((_, els)) = &i.else_branch else {
                    return err(i.span(), "an `if` that gives a value needs an `else`");
                };
                let a = single_expr(&i.then_branch).ok_or_else(|| {
                    syn::Error::new(
                        i.span(),
                        "an `if` with statements gives a value only in a `let` with a type, \
                         an assignment, or a return",
                    )
                })?;
                let b = match &**els {
                    Expr::Block(b) => single_expr(&b.block),
                    e @ Expr::If(_) => Some(e),
                    _ => None,
                }
                .ok_or_else(|| syn::Error::new(els.span(), "an `else` with statements gives a value only in a `let` with a type, an assignment, or a return"))?;
                let c = self.expr(&i.cond, Want::None)?;
                let (ac, bc) = self.pair(a, b, want, i.span())?;
                format!("((GYRE_TYPEOF({ac}))({c} ? {ac} : {bc}))")
            }
            Expr::Struct(_)
            | Expr::Array(_)
            | Expr::Repeat(_)
            | Expr::Match(_)
            | Expr::Block(_) => {
                return err(
                    e.span(),
                    "a struct or array literal, `match` or block gives a value only in a `let`, \
                     an assignment, or a return: bind it to a local first",
                )
            }
            _ => return err(e.span(), ALLOWED_EXPR),
        })
    }

    fn binary(&mut self, b: &syn::ExprBinary, want: Want) -> Result<String> {
        let span = b.span();
        let (op, cmp) = match b.op {
            BinOp::Add(_) => ("add", false),
            BinOp::Sub(_) => ("sub", false),
            BinOp::Mul(_) => ("mul", false),
            BinOp::Div(_) => ("div", false),
            BinOp::Rem(_) => ("rem", false),
            BinOp::BitAnd(_) => ("and", false),
            BinOp::BitOr(_) => ("or", false),
            BinOp::BitXor(_) => ("xor", false),
            BinOp::Shl(_) => ("shl", false),
            BinOp::Shr(_) => ("shr", false),
            BinOp::And(_) => ("&&", true),
            BinOp::Or(_) => ("||", true),
            BinOp::Eq(_) => ("==", true),
            BinOp::Ne(_) => ("!=", true),
            BinOp::Lt(_) => ("<", true),
            BinOp::Le(_) => ("<=", true),
            BinOp::Gt(_) => (">", true),
            BinOp::Ge(_) => (">=", true),
            _ => return err(span, "assignment operators are statements in a handler"),
        };
        if op == "shl" || op == "shr" {
            let l = self.expr(&b.left, want)?;
            let u32_t = self.scalar_ty("u32");
            let r = self.expr(&b.right, Want::Ty(u32_t))?;
            return Ok(helper_call(op, &l, &r));
        }
        if cmp {
            // `bool`: OpenCL C's relational and logical operators give `int`, which would
            // pick the integer overloads (`gyre_not` as `~`).
            let (l, r) = self.pair(&b.left, &b.right, Want::None, span)?;
            return Ok(format!("((bool)({l} {op} {r}))"));
        }
        let (l, r) = self.pair(&b.left, &b.right, want, span)?;
        Ok(helper_call(op, &l, &r))
    }

    fn method(&mut self, name: &str, recv: String, args: Vec<&Expr>, span: Span) -> Result<String> {
        let Some(arity) = method_arity(name) else {
            return err(
                span,
                format!(
                    "`{name}` is not in the handler subset; the methods are: {}",
                    METHODS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        };
        if args.len() != arity {
            return err(span, format!("`{name}` takes {arity} argument(s)"));
        }
        let mut a = vec![recv.clone()];
        for x in args {
            a.push(self.expr(x, Want::Ty(format!("GYRE_TYPEOF({recv})")))?);
        }
        let f = match name {
            "wrapping_add" => "add",
            "wrapping_sub" => "sub",
            "wrapping_mul" => "mul",
            "wrapping_neg" => "neg",
            n => n,
        };
        Ok(format!("gyre_{f}({})", a.join(", ")))
    }

    fn call(&mut self, c: &syn::ExprCall, want: Want) -> Result<String> {
        let Expr::Path(p) = &*c.func else {
            return err(c.func.span(), "call a #[gyre::handler_fn] by its name");
        };
        if p.qself.is_some() {
            return err(p.span(), "no qualified calls in a handler");
        }
        let segs: Vec<String> = p
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        // `f32::sqrt(x)`: a method called by its path.
        if segs.len() == 2
            && literal::scalar_c(&segs[0]).is_some()
            && method_arity(&segs[1]).is_some()
        {
            let mut args = c.args.iter();
            let Some(recv) = args.next() else {
                return err(c.span(), "the receiver is the first argument");
            };
            let _ = want;
            let recv_ty = self.scalar_ty(&segs[0]);
            let r = self.expr(recv, Want::Ty(recv_ty))?;
            let r = format!(
                "(({})({r}))",
                literal::scalar_c(&segs[0]).unwrap_or("uint64_t")
            );
            return self.method(&segs[1], r, args.collect(), c.span());
        }
        if p.path.segments.iter().any(|s| !s.arguments.is_none()) {
            return err(p.span(), "no generic arguments in a handler call");
        }
        if segs.last().map(String::as_str) == Some(self.own.as_str()) && segs.len() == 1 {
            return err(
                p.span(),
                "recursion is not in the handler subset (OpenCL forbids it)",
            );
        }
        let mut args = Vec::new();
        for a in &c.args {
            if untyped(a) {
                return err(
                    a.span(),
                    "an argument literal needs a suffix (`2.0f32`, `3u8`): gyre does not see the \
                     helper's parameter types",
                );
            }
            args.push(self.expr(a, Want::None)?);
        }
        args.push("gyre_p".into());
        let idx = self.fns.len();
        self.fns.push(p.path.clone());
        Ok(format!("\u{1}F{idx}\u{2}({})", args.join(", ")))
    }

    fn path_value(&mut self, p: &Path, qself: bool) -> Result<String> {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if !qself && segs.len() == 1 {
            if let Some(c) = self.lookup(&segs[0]) {
                return Ok(c.to_owned());
            }
            if self.bytes.as_deref() == Some(segs[0].as_str()) {
                return err(
                    p.span(),
                    format!(
                        "`{0}` is this handler's `Bytes`: use it only as `{0}.len()`, \
                         `{0}.capacity()`, `{0}.get(i)` and `{0}.set(i, v)`",
                        segs[0]
                    ),
                );
            }
            return err(
                p.span(),
                format!(
                    "`{}` is not a local or parameter of this handler (consts and statics are \
                     not seen by the translator: use a literal)",
                    segs[0]
                ),
            );
        }
        if segs.len() == 2 {
            if let Some(c) = literal::assoc_const(&segs[0], &segs[1]) {
                self.scalar_ty(&segs[0]);
                return Ok(c);
            }
        }
        // core::f32::consts::PI, std::f64::consts::E, f32::consts::PI.
        let n = segs.len();
        if n >= 3 && segs[n - 2] == "consts" {
            if let Some(c) = literal::math_const(&segs[n - 3], &segs[n - 1]) {
                return Ok(c);
            }
        }
        err(
            p.span(),
            "a path in a handler is a local, `T::MAX`/`MIN`/`BITS`, an f32/f64 constant \
             (`f32::EPSILON`, `INFINITY`, ...) or `core::f32::consts::PI`-style",
        )
    }

    fn lit(&mut self, l: &ExprLit, want: &Want) -> Result<String> {
        match &l.lit {
            Lit::Bool(b) => Ok(if b.value { "true" } else { "false" }.into()),
            Lit::Int(i) => {
                let v: u128 = if i.base10_digits().starts_with('-') {
                    i.base10_parse::<i128>()? as u128
                } else {
                    i.base10_parse()?
                };
                let suffix = i.suffix();
                if matches!(suffix, "f32" | "f64") {
                    return self.float_value(v as f64, suffix, want, l.span());
                }
                if !suffix.is_empty() {
                    self.scalar_ty(suffix);
                    return Ok(literal::int_c(suffix, v));
                }
                match want {
                    Want::Ty(t) => Ok(format!("(({t}){}ull)", v as u64)),
                    Want::Fallback => {
                        self.scalar_ty("i32");
                        Ok(literal::int_c("i32", v))
                    }
                    Want::None => err(
                        l.span(),
                        "an unsuffixed literal here has no known type: add a suffix (`1u32`) or \
                         a type to the `let`",
                    ),
                }
            }
            Lit::Float(f) => {
                let v: f64 = f.base10_parse()?;
                // Parse the f32 from the digits, not from the f64: no double rounding.
                let suffix = f.suffix().to_owned();
                self.float_value_text(f.base10_digits(), v, &suffix, want, l.span())
            }
            _ => err(
                l.span(),
                "a handler literal is an integer, a float or a bool",
            ),
        }
    }

    fn float_value(&mut self, v: f64, suffix: &str, want: &Want, span: Span) -> Result<String> {
        let digits = format!("{v}");
        self.float_value_text(&digits, v, suffix, want, span)
    }

    fn float_value_text(
        &mut self,
        digits: &str,
        v: f64,
        suffix: &str,
        want: &Want,
        span: Span,
    ) -> Result<String> {
        let f32v: f32 = digits
            .parse()
            .map_err(|e| syn::Error::new(span, format!("float literal: {e}")))?;
        match suffix {
            "f32" => {
                self.scalar_ty("f32");
                Ok(format!("((float){})", literal::hex_f32(f32v)))
            }
            "f64" => {
                self.scalar_ty("f64");
                Ok(format!("((double){})", literal::hex_f64(v)))
            }
            _ => match want {
                Want::Ty(t) => Ok(format!(
                    "GYRE_FLIT({t}, {}, {})",
                    literal::hex_f64(v),
                    literal::hex_f32(f32v)
                )),
                Want::Fallback => {
                    self.scalar_ty("f64");
                    Ok(format!("((double){})", literal::hex_f64(v)))
                }
                Want::None => err(
                    span,
                    "an unsuffixed float literal here has no known type: write `1.0f32` or \
                     `1.0f64`, or give the `let` a type",
                ),
            },
        }
    }
}

/// Where a block's value goes.
#[derive(Clone)]
enum Tail {
    /// Returned from the function.
    Return,
    /// Stored in a C lvalue of a C type.
    Into(String, String),
    /// Dropped (a statement).
    Discard,
}

/// The helper call of a binary operator.
fn helper_call(op: &str, l: &str, r: &str) -> String {
    match op {
        "div" | "rem" => format!("gyre_{op}({l}, {r}, gyre_p)"),
        _ => format!("gyre_{op}({l}, {r})"),
    }
}

/// The helper of a compound assignment operator.
fn compound(op: &BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::AddAssign(_) => "add",
        BinOp::SubAssign(_) => "sub",
        BinOp::MulAssign(_) => "mul",
        BinOp::DivAssign(_) => "div",
        BinOp::RemAssign(_) => "rem",
        BinOp::BitAndAssign(_) => "and",
        BinOp::BitOrAssign(_) => "or",
        BinOp::BitXorAssign(_) => "xor",
        BinOp::ShlAssign(_) => "shl",
        BinOp::ShrAssign(_) => "shr",
        _ => return None,
    })
}

/// `(x)` -> `x`.
fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        Expr::Group(g) => unparen(&g.expr),
        e => e,
    }
}

/// The C name of a struct field: prefixed, so that no Rust name (`long`, `int`,
/// `r#type`) is a C keyword. `#[derive(DeviceType)]` declares fields the same way.
pub(crate) fn c_field(rust: &str) -> String {
    format!("f_{}", rust.trim_start_matches("r#"))
}

#[derive(Clone, Copy, PartialEq)]
enum LitKind {
    Int,
    Float,
}

/// The kind of an unsuffixed literal `e` (through `-` and parentheses), if it is one.
fn literal_kind(e: &Expr) -> Option<LitKind> {
    match unparen(e) {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) if i.suffix().is_empty() => Some(LitKind::Int),
            Lit::Float(f) if f.suffix().is_empty() => Some(LitKind::Float),
            _ => None,
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => literal_kind(&u.expr),
        _ => None,
    }
}

/// Whether `e` is a literal whose type comes from its context (no suffix).
fn untyped(e: &Expr) -> bool {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => i.suffix().is_empty(),
            Lit::Float(f) => f.suffix().is_empty(),
            _ => false,
        },
        Expr::Unary(u) => matches!(u.op, UnOp::Neg(_) | UnOp::Not(_)) && untyped(&u.expr),
        Expr::Paren(p) => untyped(&p.expr),
        Expr::Group(g) => untyped(&g.expr),
        Expr::Binary(b) => untyped(&b.left) && untyped(&b.right),
        _ => false,
    }
}

/// Whether a `let` without a type cannot take its initializer's type in C.
fn needs_type(e: &Expr) -> bool {
    untyped(e)
        || matches!(
            e,
            Expr::Array(_) | Expr::Repeat(_) | Expr::Match(_) | Expr::Block(_)
        )
        || matches!(e, Expr::If(i) if single_expr(&i.then_branch).is_none())
}

/// An arm of the `match` `e` (a `let` initializer without a type) that names the
/// match's type: its value is a plain expression with a type of its own (not an
/// unsuffixed literal, not a block or another `match`), and its pattern binds nothing, so
/// the expression means the same outside the arm. Rust gives every arm one type.
fn typing_arm(e: &Expr) -> Option<&Expr> {
    let Expr::Match(m) = unparen(e) else {
        return None;
    };
    m.arms.iter().find_map(|a| {
        let body = match unparen(&a.body) {
            Expr::Block(b) if b.label.is_none() => single_expr(&b.block)?,
            b => b,
        };
        let plain = !needs_type(body)
            && !is_block_like(body)
            && !matches!(
                body,
                Expr::Return(_) | Expr::Break(_) | Expr::Continue(_) | Expr::Struct(_)
            );
        (plain && binds_nothing(&a.pat)).then_some(body)
    })
}

/// Whether a pattern binds no name (literals, ranges, `_`, paths, or-patterns of them).
fn binds_nothing(p: &Pat) -> bool {
    match p {
        Pat::Lit(_) | Pat::Range(_) | Pat::Wild(_) | Pat::Path(_) => true,
        Pat::Or(o) => o.cases.iter().all(binds_nothing),
        Pat::Paren(q) => binds_nothing(&q.pat),
        _ => false,
    }
}

/// Statement-like expressions that may end a statement without `;`.
fn is_block_like(e: &Expr) -> bool {
    matches!(
        e,
        Expr::If(_)
            | Expr::Match(_)
            | Expr::While(_)
            | Expr::Loop(_)
            | Expr::ForLoop(_)
            | Expr::Block(_)
    )
}

/// The only expression of a block with no statements.
fn single_expr(b: &Block) -> Option<&Expr> {
    match b.stmts.as_slice() {
        [Stmt::Expr(e, None)] => Some(e),
        _ => None,
    }
}

/// The name of a scalar type written as a single identifier.
fn scalar_name(t: &Type) -> Option<String> {
    match t {
        Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            let n = p.path.segments[0].ident.to_string();
            literal::scalar_c(&n).map(|_| n)
        }
        Type::Paren(p) => scalar_name(&p.elem),
        Type::Group(g) => scalar_name(&g.elem),
        _ => None,
    }
}

/// Whether a literal's (or constant's) suffix names an integer type.
#[allow(dead_code)]
pub(crate) fn is_int_type(name: &str) -> bool {
    literal::is_int(name)
}
