//! What an engine module declares it reads or writes of an object, beside
//! the code that reads it: [`super::view`] keeps exactly those paths.

/// A path of object keys, as the engine's reads take it.
pub(crate) type Path = &'static [&'static str];

/// What an engine module reads or writes of an object: the view keeps it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Read {
    /// The value at the path, whole.
    Whole(Path),
    /// These members of the object at the path, each whole.
    Members(Path, &'static [&'static str]),
    /// Every element of the list at the path; of each, these members, each
    /// whole.
    Each(Path, &'static [&'static str]),
}
