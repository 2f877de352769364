//! `#[derive(DeviceType)]`: the C declaration of a `#[repr(C)]` struct, with its size,
//! alignment and every field offset asserted by the device compiler against Rust's.

use proc_macro2::TokenStream;
use quote::quote;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields};

pub(crate) fn device_type(d: &DeriveInput) -> syn::Result<TokenStream> {
    let name = &d.ident;
    if !d.generics.params.is_empty() {
        return Err(syn::Error::new(
            d.generics.span(),
            "a DeviceType struct cannot be generic",
        ));
    }
    let repr_c = d.attrs.iter().any(|a| {
        a.path().is_ident("repr")
            && a.parse_nested_meta(|m| {
                if m.path.is_ident("C") {
                    Err(m.error("found"))
                } else {
                    Ok(())
                }
            })
            .is_err()
    });
    if !repr_c {
        return Err(syn::Error::new(
            d.ident.span(),
            "a DeviceType struct is #[repr(C)]: its layout must be C's",
        ));
    }
    let Data::Struct(s) = &d.data else {
        return Err(syn::Error::new(
            d.ident.span(),
            "DeviceType is for structs (scalars and arrays are built in)",
        ));
    };
    let Fields::Named(fields) = &s.fields else {
        return Err(syn::Error::new(
            s.fields.span(),
            "a DeviceType struct has named fields",
        ));
    };
    let c = format!("gyre_t_{name}");
    let tys: Vec<_> = fields.named.iter().map(|f| &f.ty).collect();
    let idents: Vec<_> = fields
        .named
        .iter()
        .filter_map(|f| f.ident.as_ref())
        .collect();
    // C names: prefixed (see `translate::c_field`), so no field is a C keyword.
    let names: Vec<String> = idents
        .iter()
        .map(|i| crate::translate::c_field(&i.to_string()))
        .collect();
    Ok(quote! {
        impl ::gyre::portable::DeviceType for #name {
            fn c_name() -> ::std::string::String {
                ::std::string::String::from(#c)
            }
            fn declare(d: &mut ::gyre::portable::Decls) {
                if !d.begin(#c) {
                    return;
                }
                #( <#tys as ::gyre::portable::DeviceType>::declare(d); )*
                let mut s = ::std::format!("typedef struct {} {{\n", #c);
                #(
                    s.push_str(&::std::format!(
                        "    {} {};\n",
                        <#tys as ::gyre::portable::DeviceType>::c_name(),
                        #names
                    ));
                )*
                s.push_str(&::std::format!("}} {};\n", #c));
                s.push_str(&::gyre::portable::layout_asserts(
                    #c,
                    ::core::mem::size_of::<Self>(),
                    ::core::mem::align_of::<Self>(),
                    &[#( (#names, ::core::mem::offset_of!(Self, #idents)) ),*],
                ));
                d.push(s);
            }
        }
    })
}
