//! Expressions of a handler: operators (as `gyre/portable.h` helpers where C differs
//! from Rust), method and helper calls, paths and constants, literals.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{BinOp, Expr, ExprLit, Lit, Path, UnOp};

use super::syntax::*;
use super::{err, method_arity, Result, Translator, Want, ALLOWED_EXPR, METHODS};
use crate::literal;

impl Translator {
    /// Two operands of one type: an unsuffixed literal takes the other's type.
    pub(super) fn pair(
        &mut self,
        a: &Expr,
        b: &Expr,
        want: Want,
        span: Span,
    ) -> Result<(String, String)> {
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
    pub(super) fn binary_c(
        &mut self,
        op: &str,
        lhs: String,
        rhs: &Expr,
        bop: &BinOp,
    ) -> Result<String> {
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
    pub(super) fn expr(&mut self, e: &Expr, want: Want) -> Result<String> {
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

    pub(super) fn binary(&mut self, b: &syn::ExprBinary, want: Want) -> Result<String> {
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

    pub(super) fn method(
        &mut self,
        name: &str,
        recv: String,
        args: Vec<&Expr>,
        span: Span,
    ) -> Result<String> {
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

    pub(super) fn call(&mut self, c: &syn::ExprCall, want: Want) -> Result<String> {
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

    pub(super) fn path_value(&mut self, p: &Path, qself: bool) -> Result<String> {
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

    pub(super) fn lit(&mut self, l: &ExprLit, want: &Want) -> Result<String> {
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

    pub(super) fn float_value(
        &mut self,
        v: f64,
        suffix: &str,
        want: &Want,
        span: Span,
    ) -> Result<String> {
        let digits = format!("{v}");
        self.float_value_text(&digits, v, suffix, want, span)
    }

    pub(super) fn float_value_text(
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
