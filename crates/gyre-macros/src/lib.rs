//! gyre's procedural macros, re-exported by `gyre`: write a handler once, in Rust, and
//! run it natively on the CPU backend and as generated C on CUDA and OpenCL.
//!
//! - `#[gyre::handler]` on `fn name(req: Req) -> Resp` keeps the function callable from
//!   Rust (as `name(req)`) and turns `name` into a `gyre::portable::Portable<Req, Resp>`
//!   constant that `KernelSpec::portable(name)` launches. It carries the C translation of
//!   the body over `gyre/portable.h`.
//! - `#[gyre::handler_fn]` on a helper `fn` makes it callable from handlers (its C comes
//!   along).
//! - `#[derive(gyre::DeviceType)]` on a `#[repr(C)]` struct of device types gives it a C
//!   declaration, with the Rust layout checked by the device compiler.
//!
//! The subset and its semantics are in `docs/handlers.md`; anything outside it is a
//! compile error at its span naming what is allowed.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{parse_macro_input, DeriveInput, ItemFn, Path};

mod derive;
mod literal;
mod rewrite;
mod translate;

/// A handler for every backend: see the crate docs and `docs/handlers.md`.
/// `#[gyre::handler(lanes)]` is the lane-parallel form, `#[gyre::handler(loan)]` the
/// form over a loan's block (`fn f(b: gyre::portable::Bytes) -> u32`).
#[proc_macro_attribute]
pub fn handler(attr: TokenStream, item: TokenStream) -> TokenStream {
    let f = parse_macro_input!(item as ItemFn);
    let attr = TokenStream2::from(attr);
    let kind = if attr.is_empty() {
        Kind::Handler
    } else if attr.to_string() == "lanes" {
        Kind::Lanes
    } else if attr.to_string() == "loan" {
        Kind::Loan
    } else {
        return syn::Error::new(
            attr.span(),
            "the options are `lanes` and `loan`: #[gyre::handler(lanes)], \
             #[gyre::handler(loan)]",
        )
        .into_compile_error()
        .into();
    };
    expand(TokenStream2::new(), f, kind)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// A helper that handlers may call: see the crate docs and `docs/handlers.md`.
#[proc_macro_attribute]
pub fn handler_fn(attr: TokenStream, item: TokenStream) -> TokenStream {
    let f = parse_macro_input!(item as ItemFn);
    expand(attr.into(), f, Kind::Helper)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The C declaration of a `#[repr(C)]` struct: see the crate docs.
#[proc_macro_derive(DeviceType)]
pub fn derive_device_type(item: TokenStream) -> TokenStream {
    let d = parse_macro_input!(item as DeriveInput);
    derive::device_type(&d)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

#[derive(PartialEq, Clone, Copy)]
pub(crate) enum Kind {
    Handler,
    Lanes,
    /// Over a loan's block: `fn f(b: gyre::portable::Bytes) -> u32`.
    Loan,
    Helper,
}

/// The companion constant of helper `f` (`a::b::f` -> `a::b::__gyre_fn_f`), spanned at
/// the call so a missing `#[gyre::handler_fn]` is reported there.
fn companion(p: &Path) -> Path {
    let mut p = p.clone();
    if let Some(last) = p.segments.last_mut() {
        last.ident = format_ident!("__gyre_fn_{}", last.ident, span = last.ident.span());
    }
    p
}

fn expand(attr: TokenStream2, mut f: ItemFn, kind: Kind) -> syn::Result<TokenStream2> {
    if !attr.is_empty() {
        return Err(syn::Error::new(
            attr.span(),
            "this attribute takes no arguments",
        ));
    }
    let name = f.sig.ident.clone();
    let mut tr = translate::Translator::new(&name.to_string());
    let c_name = match kind {
        Kind::Handler | Kind::Lanes | Kind::Loan => "gyre_h".to_owned(),
        Kind::Helper => "\u{1}S\u{2}".to_owned(),
    };
    if kind == Kind::Loan {
        let returns_u32 = matches!(&f.sig.output,
            syn::ReturnType::Type(_, t) if matches!(&**t, syn::Type::Path(tp) if tp.path.is_ident("u32")));
        let arity = matches!(f.sig.inputs.len(), 1 | 2);
        if !arity || !returns_u32 {
            let at = if !arity {
                f.sig.inputs.span()
            } else {
                f.sig.output.span()
            };
            return Err(syn::Error::new(
                at,
                "a loan handler takes its block (and, lane-parallel, its lane) and returns \
                 the reply's length: `fn f(b: gyre::portable::Bytes) -> u32` or \
                 `fn f(b: gyre::portable::Bytes, lane: gyre::portable::Lane) -> u32`",
            ));
        }
    }
    let c = tr.function(&c_name, &f, kind)?;
    let (req, resp) = match kind {
        Kind::Loan => (None, None),
        Kind::Handler | Kind::Lanes => {
            let want = if kind == Kind::Lanes { 2 } else { 1 };
            if f.sig.inputs.len() != want {
                return Err(syn::Error::new(
                    f.sig.inputs.span(),
                    if kind == Kind::Lanes {
                        "a lane-parallel handler takes the request and its lane: \
                         `fn f(req: Req, lane: gyre::portable::Lane) -> Resp`"
                    } else {
                        "a handler takes one parameter, the request"
                    },
                ));
            }
            let Some(syn::FnArg::Typed(pt)) = f.sig.inputs.first() else {
                return Err(syn::Error::new(f.sig.span(), "a handler takes the request"));
            };
            let syn::ReturnType::Type(_, resp) = &f.sig.output else {
                return Err(syn::Error::new(f.sig.span(), "a handler returns the reply"));
            };
            (Some((*pt.ty).clone()), Some((**resp).clone()))
        }
        Kind::Helper => (None, None),
    };
    rewrite::Rewrite.visit_block_mut(&mut f.block);

    let types = tr.types.iter().map(|t| {
        quote_spanned! {t.span()=>
            ::gyre::portable::TypeRef {
                c_name: <#t as ::gyre::portable::DeviceType>::c_name,
                declare: <#t as ::gyre::portable::DeviceType>::declare,
            }
        }
    });
    let fns = tr.fns.iter().map(|p| {
        let c = companion(p);
        quote_spanned! {p.span()=> &#c }
    });
    let name_str = name.to_string();
    let source = quote! {
        ::gyre::portable::Source {
            name: #name_str,
            module: ::core::module_path!(),
            line: ::core::line!(),
            column: ::core::column!(),
            c: #c,
            types: &[#(#types),*],
            fns: &[#(#fns),*],
        }
    };
    let vis = &f.vis;
    Ok(match kind {
        Kind::Handler | Kind::Lanes | Kind::Loan => {
            let imp = format_ident!("__gyre_handler_{}", name);
            // Docs go to the constant users see; `cfg` and lint levels to both; the rest
            // (`#[inline]`, ...) to the function.
            let is =
                |a: &syn::Attribute, names: &[&str]| names.iter().any(|n| a.path().is_ident(n));
            let shared = [
                "cfg", "cfg_attr", "allow", "warn", "deny", "forbid", "expect",
            ];
            let attrs: Vec<_> = f
                .attrs
                .iter()
                .filter(|a| is(a, &["doc"]) || is(a, &shared))
                .collect();
            let fn_attrs: Vec<_> = f.attrs.iter().filter(|a| !is(a, &["doc"])).collect();
            let sig = {
                let mut s = f.sig.clone();
                s.ident = imp.clone();
                s
            };
            let block = &f.block;
            let (req, resp) = (req, resp);
            let (ty, ctor) = match (kind, tr.reduce) {
                (Kind::Loan, _) if f.sig.inputs.len() == 2 => (
                    quote!(::gyre::portable::PortableLoanLanes),
                    quote!(::gyre::portable::PortableLoanLanes::__new(#imp, #source)),
                ),
                (Kind::Loan, _) => (
                    quote!(::gyre::portable::PortableLoan),
                    quote!(::gyre::portable::PortableLoan::__new(#imp, #source)),
                ),
                (Kind::Lanes, Some(op)) => {
                    let op = format_ident!("{}", op);
                    (
                        quote!(::gyre::portable::PortableLanes<#req, #resp>),
                        quote!(::gyre::portable::PortableLanes::__new(#imp, #source, ::gyre::portable::Reduce::#op)),
                    )
                }
                _ => (
                    quote!(::gyre::portable::Portable<#req, #resp>),
                    quote!(::gyre::portable::Portable::__new(#imp, #source)),
                ),
            };
            quote! {
                #(#fn_attrs)*
                #[doc(hidden)]
                #[allow(non_snake_case, unused_parens, clippy::all)]
                #vis #sig #block

                #(#attrs)*
                #[allow(non_upper_case_globals)]
                #vis const #name: #ty = #ctor;
            }
        }
        Kind::Helper => {
            let comp = format_ident!("__gyre_fn_{}", name);
            quote! {
                #f

                #[doc(hidden)]
                #[allow(non_upper_case_globals)]
                #vis const #comp: ::gyre::portable::Source = #source;
            }
        }
    })
}

#[allow(dead_code)]
fn call_site() -> Span {
    Span::call_site()
}
