//! One definition per enum that has names on the wire (the API, events, metric labels, the
//! CLI, config values): `wire_enum!` takes each variant with its name and makes the enum,
//! `as_str`, `ALL`, `NAMES`, `Display`, `FromStr` and serde's `Serialize`/`Deserialize` from
//! that one list, so a name is spelled once and every reader and writer agrees.
//!
//! ```ignore
//! wire_enum! {
//!     /// What caused a change.
//!     #[derive(Debug, Hash)]
//!     pub enum ChangeKind {
//!         Health = "health",
//!         FailOpen = "fail-open",
//!     }
//! }
//! ```

/// A name that is none of an enum's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}; expected one of: {}", .allowed.join(", "))]
pub struct UnknownName {
    pub what: &'static str,
    pub value: String,
    pub allowed: &'static [&'static str],
}

/// Makes a fieldless enum whose variants each have one name on the wire (see the module).
/// The enum is `Clone`, `Copy`, `PartialEq` and `Eq`; other derives go in its attributes.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        #[allow(dead_code, reason = "not every enum needs every accessor")]
        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// Every variant's name, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($wire),+];

            /// Its name on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire),+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::wire_enum::UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($wire => Ok($name::$variant),)+
                    _ => Err($crate::wire_enum::UnknownName {
                        what: stringify!($name),
                        value: s.to_string(),
                        allowed: $name::NAMES,
                    }),
                }
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Names;
                impl ::serde::de::Visitor<'_> for Names {
                    type Value = $name;

                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        write!(f, "one of {}", $name::NAMES.join(", "))
                    }

                    fn visit_str<E: ::serde::de::Error>(self, s: &str) -> Result<$name, E> {
                        s.parse().map_err(|_| E::unknown_variant(s, $name::NAMES))
                    }
                }
                deserializer.deserialize_str(Names)
            }
        }
    };
}

pub(crate) use wire_enum;

#[cfg(test)]
mod tests {
    wire_enum! {
        /// A test enum.
        #[derive(Debug)]
        enum Colour {
            Red = "red",
            /// Two words.
            DarkBlue = "dark-blue",
        }
    }

    #[test]
    fn each_name_goes_both_ways_and_an_unknown_one_lists_the_allowed() {
        for c in Colour::ALL {
            assert_eq!(c.as_str().parse::<Colour>(), Ok(*c));
            let json = serde_json::to_string(c).unwrap();
            assert_eq!(json, format!("\"{c}\""));
            assert_eq!(serde_json::from_str::<Colour>(&json).unwrap(), *c);
        }
        assert_eq!(Colour::NAMES, ["red", "dark-blue"]);
        assert_eq!(format!("{:>10}", Colour::Red), "       red", "Display pads");
        let e = "blue".parse::<Colour>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown Colour \"blue\"; expected one of: red, dark-blue"
        );
        let e = serde_json::from_str::<Colour>("\"blue\"").unwrap_err().to_string();
        assert!(e.contains("unknown variant `blue`") && e.contains("dark-blue"), "{e}");
    }
}
