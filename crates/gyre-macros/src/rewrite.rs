//! The Rust side of a handler: the same body, with the operators whose meaning depends
//! on the build profile made explicit, so that the function computes what the device
//! code computes in every profile. `+ - *` and unary `-` on a non-literal become
//! `::gyre::portable::ops::{add, sub, mul, neg}` (wrapping on integers, IEEE on floats);
//! `<< >>` become `ops::{shl, shr}` (the amount masked to the width); `.abs()` becomes
//! `ops::abs` (wrapping on `MIN`); compound assignments are spelt out. Division,
//! remainder, indexing and `as` keep their Rust meaning, which the C side mirrors.

use syn::visit_mut::{self, VisitMut};
use syn::{parse_quote, BinOp, Expr, UnOp};

pub(crate) struct Rewrite;

/// `(x)` -> `x`: an operand that becomes a call argument needs no parentheses.
fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        e => e,
    }
}

fn op_fn(op: &BinOp) -> Option<(&'static str, bool)> {
    Some(match op {
        BinOp::Add(_) => ("add", false),
        BinOp::Sub(_) => ("sub", false),
        BinOp::Mul(_) => ("mul", false),
        BinOp::Shl(_) => ("shl", false),
        BinOp::Shr(_) => ("shr", false),
        BinOp::AddAssign(_) => ("add", true),
        BinOp::SubAssign(_) => ("sub", true),
        BinOp::MulAssign(_) => ("mul", true),
        BinOp::ShlAssign(_) => ("shl", true),
        BinOp::ShrAssign(_) => ("shr", true),
        _ => return None,
    })
}

impl VisitMut for Rewrite {
    // Types and array lengths are constant contexts (`[u32; 2 * 2]`): no function calls.
    fn visit_type_mut(&mut self, _: &mut syn::Type) {}

    fn visit_expr_mut(&mut self, e: &mut Expr) {
        if let Expr::Repeat(r) = e {
            // `[x; N]`: only the element; N is a constant.
            self.visit_expr_mut(&mut r.expr);
            return;
        }
        visit_mut::visit_expr_mut(self, e);
        let new: Option<Expr> = match e {
            Expr::Binary(b) => op_fn(&b.op).map(|(name, assign)| {
                let f = syn::Ident::new(name, proc_macro2::Span::call_site());
                let (l, r) = (unparen(&b.left), unparen(&b.right));
                if assign {
                    parse_quote!(#l = ::gyre::portable::ops::#f(#l, #r))
                } else {
                    parse_quote!(::gyre::portable::ops::#f(#l, #r))
                }
            }),
            // `-1`, `-(2.5)`: a literal keeps its sign (`-128i8` is not `neg(128i8)`).
            Expr::Unary(u)
                if matches!(u.op, UnOp::Neg(_)) && !matches!(unparen(&u.expr), Expr::Lit(_)) =>
            {
                let x = unparen(&u.expr);
                Some(parse_quote!(::gyre::portable::ops::neg(#x)))
            }
            Expr::MethodCall(m) if m.method == "abs" && m.args.is_empty() => {
                let x = unparen(&m.receiver);
                Some(parse_quote!(::gyre::portable::ops::abs(#x)))
            }
            // `i32::abs(x)`: the same as `x.abs()` (a scalar type's, not a user's `m::abs`).
            Expr::Call(c)
                if c.args.len() == 1
                    && matches!(&*c.func, Expr::Path(p) if p.qself.is_none()
                        && p.path.segments.len() == 2
                        && crate::literal::scalar_c(&p.path.segments[0].ident.to_string()).is_some()
                        && p.path.segments[1].ident == "abs") =>
            {
                let x = unparen(&c.args[0]);
                Some(parse_quote!(::gyre::portable::ops::abs(#x)))
            }
            _ => None,
        };
        if let Some(n) = new {
            *e = n;
        }
    }
}
