//! A small reader of BTF (the kernel's type information, /sys/kernel/btf/vmlinux) that
//! finds struct member offsets. Rust eBPF has no CO-RE relocations, so the LSM programs
//! read kernel structs at offsets found here, in the kernel that is actually running.
//! Format: Documentation/bpf/btf.rst.

use std::{collections::HashMap, path::Path};

use volguard_common::{
    enforce::{CallerLayout, KernelLayout, MountTreeLayout},
    open_guard::OpenGuardLayout,
};

/// The running kernel's BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u8 = 4;
const KIND_UNION: u8 = 5;
const KIND_TYPEDEF: u8 = 8;
const KIND_VOLATILE: u8 = 9;
const KIND_CONST: u8 = 10;
const KIND_RESTRICT: u8 = 11;
const KIND_FUNC: u8 = 12;
const KIND_FUNC_PROTO: u8 = 13;
const KIND_PTR: u8 = 2;
const KIND_TYPE_TAG: u8 = 18;

/// Why BTF could not be read or lacks what we need.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("reading {path} failed: {message}")]
    Read { path: String, message: String },
    #[error("not BTF (bad magic or header)")]
    BadHeader,
    #[error("BTF ends inside a type record (at byte {0})")]
    Truncated(usize),
    #[error("unknown BTF kind {0}")]
    UnknownKind(u8),
    #[error("struct {0} not found in BTF")]
    NoStruct(String),
    #[error("struct {strukt} has no member {member}")]
    NoMember { strukt: String, member: String },
    #[error("{strukt}.{member} is a bitfield")]
    Bitfield { strukt: String, member: String },
    #[error("function {0} not found in BTF")]
    NoFunction(String),
    #[error("function {function}'s parameters are not (…, struct {wanted} *, …)")]
    NoParameter { function: String, wanted: String },
}

#[derive(Debug)]
struct Member {
    name_off: u32,
    type_id: u32,
    bit_offset: u32,
    bitfield: bool,
}

#[derive(Debug)]
struct Type {
    kind: u8,
    name_off: u32,
    /// Referenced type for modifiers and typedefs.
    type_ref: u32,
    members: Vec<Member>,
}

/// Parsed type section and string table.
pub struct Btf {
    /// Type id `i` is `types[i - 1]` (id 0 is void).
    types: Vec<Type>,
    strings: Vec<u8>,
    structs_by_name: HashMap<String, u32>,
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, BtfError> {
    data.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok_or(BtfError::Truncated(at))
}

impl Btf {
    pub fn from_file(path: &Path) -> Result<Self, BtfError> {
        let data = std::fs::read(path)
            .map_err(|e| BtfError::Read { path: path.display().to_string(), message: e.to_string() })?;
        Self::parse(&data)
    }

    pub fn parse(data: &[u8]) -> Result<Self, BtfError> {
        if data.len() < 24 || u16::from_le_bytes([data[0], data[1]]) != MAGIC {
            return Err(BtfError::BadHeader);
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let (type_off, type_len) = (u32_at(data, 8)? as usize, u32_at(data, 12)? as usize);
        let (str_off, str_len) = (u32_at(data, 16)? as usize, u32_at(data, 20)? as usize);
        let type_start = hdr_len.checked_add(type_off).ok_or(BtfError::BadHeader)?;
        let type_end = type_start.checked_add(type_len).ok_or(BtfError::BadHeader)?;
        let str_start = hdr_len.checked_add(str_off).ok_or(BtfError::BadHeader)?;
        let strings = data.get(str_start..str_start + str_len).ok_or(BtfError::BadHeader)?.to_vec();
        let section = data.get(type_start..type_end).ok_or(BtfError::BadHeader)?;

        let mut types = Vec::new();
        let mut at = 0;
        while at < section.len() {
            let (name_off, info, size_or_type) =
                (u32_at(section, at)?, u32_at(section, at + 4)?, u32_at(section, at + 8)?);
            at += 12;
            let kind = ((info >> 24) & 0x1f) as u8;
            let vlen = (info & 0xffff) as usize;
            let kind_flag = info >> 31 == 1;
            let mut members = Vec::new();
            let extra = match kind {
                2 | 7..=12 | 16 | 18 => 0,
                1 | 14 | 17 => 4,
                3 => 12,
                KIND_STRUCT | KIND_UNION => {
                    for i in 0..vlen {
                        let m = at + 12 * i;
                        let raw = u32_at(section, m + 8)?;
                        members.push(Member {
                            name_off: u32_at(section, m)?,
                            type_id: u32_at(section, m + 4)?,
                            bit_offset: if kind_flag { raw & 0xff_ffff } else { raw },
                            bitfield: kind_flag && raw >> 24 != 0,
                        });
                    }
                    12 * vlen
                }
                KIND_FUNC_PROTO => {
                    // Parameters: (name, type); kept as members at no offset.
                    for i in 0..vlen {
                        let p = at + 8 * i;
                        let (name_off, type_id) = (u32_at(section, p)?, u32_at(section, p + 4)?);
                        members.push(Member { name_off, type_id, bit_offset: 0, bitfield: false });
                    }
                    8 * vlen
                }
                6 => 8 * vlen,
                15 | 19 => 12 * vlen,
                other => return Err(BtfError::UnknownKind(other)),
            };
            at += extra;
            if at > section.len() {
                return Err(BtfError::Truncated(type_start + at));
            }
            types.push(Type { kind, name_off, type_ref: size_or_type, members });
        }

        let mut btf = Self { types, strings, structs_by_name: HashMap::new() };
        for (index, ty) in btf.types.iter().enumerate() {
            if ty.kind == KIND_STRUCT && !ty.members.is_empty() {
                let name = btf.name(ty.name_off).to_owned();
                btf.structs_by_name.entry(name).or_insert(index as u32 + 1);
            }
        }
        Ok(btf)
    }

    fn name(&self, offset: u32) -> &str {
        let rest = self.strings.get(offset as usize..).unwrap_or_default();
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    fn get(&self, id: u32) -> Option<&Type> {
        id.checked_sub(1).and_then(|i| self.types.get(i as usize))
    }

    /// Follows typedefs and qualifiers to the underlying type.
    fn resolve(&self, mut id: u32) -> Option<&Type> {
        for _ in 0..32 {
            let ty = self.get(id)?;
            match ty.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => id = ty.type_ref,
                _ => return Some(ty),
            }
        }
        None
    }

    /// Byte offset of `member` in `struct strukt`, looking inside anonymous structs and
    /// unions as C does.
    pub fn member_offset(&self, strukt: &str, member: &str) -> Result<u32, BtfError> {
        let id = *self.structs_by_name.get(strukt).ok_or_else(|| BtfError::NoStruct(strukt.to_owned()))?;
        let ty = self.get(id).ok_or_else(|| BtfError::NoStruct(strukt.to_owned()))?;
        let no_member = || BtfError::NoMember { strukt: strukt.to_owned(), member: member.to_owned() };
        let (bits, bitfield) = self.find_member(ty, member, 0, 0).ok_or_else(no_member)?;
        if bitfield || bits % 8 != 0 {
            return Err(BtfError::Bitfield { strukt: strukt.to_owned(), member: member.to_owned() });
        }
        Ok(bits / 8)
    }

    fn find_member(&self, ty: &Type, member: &str, base_bits: u32, depth: u32) -> Option<(u32, bool)> {
        if depth > 8 {
            return None;
        }
        for m in &ty.members {
            let bits = base_bits + m.bit_offset;
            if m.name_off != 0 && self.name(m.name_off) == member {
                return Some((bits, m.bitfield));
            }
            if m.name_off == 0
                && let Some(inner) = self.resolve(m.type_id).filter(|t| matches!(t.kind, KIND_STRUCT | KIND_UNION))
                && let Some(found) = self.find_member(inner, member, bits, depth + 1)
            {
                return Some(found);
            }
        }
        None
    }

    /// Whether the kernel has a function `name` that trampolines can attach to.
    pub fn has_function(&self, name: &str) -> bool {
        self.types.iter().any(|t| t.kind == KIND_FUNC && self.name(t.name_off) == name)
    }

    /// The position of `function`'s first parameter that points to a `struct strukt`
    /// (kernels add leading parameters to hooks, as the mount's user namespace or idmap).
    pub fn parameter_pointing_to(&self, function: &str, strukt: &str) -> Result<u32, BtfError> {
        let func = self
            .types
            .iter()
            .find(|t| t.kind == KIND_FUNC && self.name(t.name_off) == function)
            .ok_or_else(|| BtfError::NoFunction(function.to_owned()))?;
        let proto = self.get(func.type_ref).filter(|t| t.kind == KIND_FUNC_PROTO);
        let params = proto.map(|p| p.members.as_slice()).unwrap_or_default();
        let points_to = |type_id: u32| {
            let pointer = self.resolve(type_id).filter(|t| t.kind == KIND_PTR)?;
            let target = self.resolve(pointer.type_ref)?;
            Some(target.kind == KIND_STRUCT && self.name(target.name_off) == strukt)
        };
        let position = params.iter().position(|p| points_to(p.type_id) == Some(true));
        let missing = || BtfError::NoParameter { function: function.to_owned(), wanted: strukt.to_owned() };
        position.map(|at| at as u32).ok_or_else(missing)
    }

    /// The offsets the enforcement programs need.
    pub fn kernel_layout(&self) -> Result<KernelLayout, BtfError> {
        Ok(KernelLayout {
            dentry_d_parent: self.member_offset("dentry", "d_parent")?,
            dentry_d_name: self.member_offset("dentry", "d_name")?,
            dentry_d_inode: self.member_offset("dentry", "d_inode")?,
            dentry_d_sb: self.member_offset("dentry", "d_sb")?,
            qstr_len: self.member_offset("qstr", "len")?,
            qstr_name: self.member_offset("qstr", "name")?,
            inode_i_ino: self.member_offset("inode", "i_ino")?,
            super_block_s_dev: self.member_offset("super_block", "s_dev")?,
            path_dentry: self.member_offset("path", "dentry")?,
            mount_mnt: self.member_offset("mount", "mnt")?,
            mount_mnt_mountpoint: self.member_offset("mount", "mnt_mountpoint")?,
            task_nsproxy: self.member_offset("task_struct", "nsproxy")?,
            nsproxy_mnt_ns: self.member_offset("nsproxy", "mnt_ns")?,
            mnt_namespace_ns: self.member_offset("mnt_namespace", "ns")?,
            ns_common_inum: self.member_offset("ns_common", "inum")?,
            _pad: 0,
        })
    }

    /// The offsets the exit programs need to find the mount a publish attached.
    pub fn mount_tree_layout(&self) -> Result<MountTreeLayout, BtfError> {
        Ok(MountTreeLayout {
            path_mnt: self.member_offset("path", "mnt")?,
            vfsmount_mnt_root: self.member_offset("vfsmount", "mnt_root")?,
            mount_mnt_mounts: self.member_offset("mount", "mnt_mounts")?,
            mount_mnt_child: self.member_offset("mount", "mnt_child")?,
            list_head_prev: self.member_offset("list_head", "prev")?,
            _pad: 0,
        })
    }

    /// The offsets the open guard reads: an opened file's dentry, its filesystem and its
    /// ancestors, and the inode facts its verdicts are keyed by. Those the other programs
    /// read too are `known`'s (this kernel's [`Self::kernel_layout`]), the same by
    /// construction.
    pub fn open_guard_layout(&self, known: &KernelLayout) -> Result<OpenGuardLayout, BtfError> {
        Ok(OpenGuardLayout {
            file_dentry: self.member_offset("file", "f_path")? + known.path_dentry,
            path_dentry: known.path_dentry,
            dentry_d_sb: known.dentry_d_sb,
            dentry_d_inode: known.dentry_d_inode,
            dentry_d_parent: known.dentry_d_parent,
            super_block_s_dev: known.super_block_s_dev,
            inode_i_ino: known.inode_i_ino,
            inode_i_generation: self.member_offset("inode", "i_generation")?,
            inode_i_mode: self.member_offset("inode", "i_mode")?,
            inode_i_rdev: self.member_offset("inode", "i_rdev")?,
            // Where a kernel lacks one, the program that reads it cannot attach there.
            lsm_setattr_dentry_parameter: self.parameter_pointing_to("bpf_lsm_inode_setattr", "dentry").unwrap_or(0),
            fmod_ret_setattr_dentry_parameter: self
                .parameter_pointing_to("security_inode_setattr", "dentry")
                .unwrap_or(0),
        })
    }

    /// The offsets the LSM programs need to find the caller's pod from its cgroup.
    pub fn caller_layout(&self) -> Result<CallerLayout, BtfError> {
        // `__parent` in newer kernels, `parent` in older ones.
        let kernfs_node_parent =
            self.member_offset("kernfs_node", "__parent").or_else(|_| self.member_offset("kernfs_node", "parent"))?;
        Ok(CallerLayout {
            task_cgroups: self.member_offset("task_struct", "cgroups")?,
            css_set_dfl_cgrp: self.member_offset("css_set", "dfl_cgrp")?,
            cgroup_kn: self.member_offset("cgroup", "kn")?,
            kernfs_node_name: self.member_offset("kernfs_node", "name")?,
            kernfs_node_parent,
            _pad: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds BTF for: struct qstr { union { struct { u32 hash; u32 len; }; u64 hash_len; };
    /// const char *name; }, plus a typedef and a bitfield struct.
    fn sample() -> Vec<u8> {
        let strings = b"\0qstr\0hash\0len\0hash_len\0name\0u32\0flags\0bits\0".to_vec();
        let s = |name: &str| {
            strings
                .windows(name.len() + 2)
                .position(|w| w[0] == 0 && &w[1..=name.len()] == name.as_bytes() && w[name.len() + 1] == 0)
                .unwrap() as u32
                + 1
        };
        let mut types: Vec<u32> = Vec::new();
        let mut push = |words: &[u32]| types.extend_from_slice(words);
        // 1: int u32
        push(&[s("u32"), 1 << 24, 4, 32]);
        // 2: anonymous struct { hash; len; }
        push(&[0, (4 << 24) | 2, 8, s("hash"), 1, 0, s("len"), 1, 32]);
        // 3: anonymous union { struct; u64 hash_len (as u32 id 1 for brevity) }
        push(&[0, (5 << 24) | 2, 8, 0, 2, 0, s("hash_len"), 1, 0]);
        // 4: ptr to u32
        push(&[0, 2 << 24, 1]);
        // 5: struct qstr { union; name }
        push(&[s("qstr"), (4 << 24) | 2, 16, 0, 3, 0, s("name"), 4, 64]);
        // 6: struct flags { u32 bits:3 } (kind_flag set, bitfield size 3 in the top byte)
        push(&[s("flags"), (1 << 31) | (4 << 24) | 1, 4, s("bits"), 1, 3 << 24]);
        let type_bytes: Vec<u8> = types.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut data = Vec::new();
        data.extend_from_slice(&MAGIC.to_le_bytes());
        data.extend_from_slice(&[1, 0]);
        for word in [24u32, 0, type_bytes.len() as u32, type_bytes.len() as u32, strings.len() as u32] {
            data.extend_from_slice(&word.to_le_bytes());
        }
        data.extend_from_slice(&type_bytes);
        data.extend_from_slice(&strings);
        data
    }

    #[test]
    fn finds_members_inside_anonymous_unions_and_structs() {
        let btf = Btf::parse(&sample()).unwrap();
        assert_eq!(btf.member_offset("qstr", "len"), Ok(4));
        assert_eq!(btf.member_offset("qstr", "hash"), Ok(0));
        assert_eq!(btf.member_offset("qstr", "name"), Ok(8));
    }

    #[test]
    fn missing_things_and_bitfields_are_named_errors() {
        let btf = Btf::parse(&sample()).unwrap();
        assert_eq!(btf.member_offset("dentry", "d_name"), Err(BtfError::NoStruct("dentry".into())));
        assert!(matches!(btf.member_offset("qstr", "nope"), Err(BtfError::NoMember { .. })));
        assert!(matches!(btf.member_offset("flags", "bits"), Err(BtfError::Bitfield { .. })));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(Btf::parse(b"").err(), Some(BtfError::BadHeader));
        let mut data = sample();
        data.truncate(40);
        assert!(Btf::parse(&data).is_err());
        for len in 0..sample().len() {
            let _ = Btf::parse(&sample()[..len]);
        }
    }

    /// The running kernel's BTF (one that does not parse fails the test), or a skip (a
    /// failure under CI) where the kernel has none.
    fn running_kernel_btf(test: &str) -> Option<Btf> {
        if !Path::new(VMLINUX_BTF).exists() {
            crate::sys::test_skip::skip(test, &format!("no {VMLINUX_BTF} on this machine"));
            return None;
        }
        Some(Btf::from_file(Path::new(VMLINUX_BTF)).expect("the running kernel's BTF parses"))
    }

    #[test]
    fn the_running_kernel_has_every_offset_we_need() {
        let Some(btf) = running_kernel_btf("the_running_kernel_has_every_offset_we_need") else { return };
        let layout = btf.kernel_layout().unwrap();
        // Stable facts of these structs, whatever the kernel version.
        assert_eq!((layout.path_dentry, layout.qstr_len, layout.qstr_name), (8, 4, 8));
        assert!(layout.dentry_d_name > layout.dentry_d_parent);
        assert!(layout.mount_mnt_mountpoint < layout.mount_mnt, "mountpoint precedes the embedded vfsmount");
        let tree = btf.mount_tree_layout().unwrap();
        assert_eq!((tree.path_mnt, tree.vfsmount_mnt_root, tree.list_head_prev), (0, 0, 8));
        // The programs take 0 in mnt_child for "not configured".
        assert!(tree.mount_mnt_child > tree.mount_mnt_mounts && tree.mount_mnt_mounts > layout.mount_mnt);
        let caller = btf.caller_layout().unwrap();
        // The programs take 0 in task_cgroups for "not configured".
        assert!(caller.task_cgroups > 0 && caller.kernfs_node_name != caller.kernfs_node_parent);
        // The open guard takes 0 in file_dentry for "not configured": f_path follows the
        // lock and the mode in every kernel's `struct file`.
        let guard = btf.open_guard_layout(&layout).unwrap();
        assert!(guard.file_dentry > 8);
        assert!(guard.inode_i_generation > layout.inode_i_ino && guard.inode_i_mode < layout.inode_i_ino);
        assert!(guard.inode_i_rdev > layout.inode_i_ino);
        // Whatever comes before it, the dentry is followed by the attributes.
        let attributes = btf.parameter_pointing_to("security_inode_setattr", "iattr");
        assert_eq!(attributes, Ok(guard.fmod_ret_setattr_dentry_parameter + 1));
        if btf.has_function("bpf_lsm_inode_setattr") {
            let attributes = btf.parameter_pointing_to("bpf_lsm_inode_setattr", "iattr");
            assert_eq!(attributes, Ok(guard.lsm_setattr_dentry_parameter + 1));
        }
        assert_eq!(btf.parameter_pointing_to("security_path_link", "path"), Ok(1));
        assert!(btf.parameter_pointing_to("security_file_open", "dentry").is_err());
        assert!(btf.parameter_pointing_to("no_such_function", "file").is_err());
    }

    #[test]
    fn the_trampolines_read_syscall_arguments_where_the_running_kernel_keeps_them() {
        use volguard_common::programs::{PT_REGS_ARG_NAMES, PT_REGS_ARG_OFFSETS};
        let Some(btf) =
            running_kernel_btf("the_trampolines_read_syscall_arguments_where_the_running_kernel_keeps_them")
        else {
            return;
        };
        for (name, offset) in PT_REGS_ARG_NAMES.iter().zip(PT_REGS_ARG_OFFSETS) {
            assert_eq!(btf.member_offset("pt_regs", name), Ok(offset as u32), "pt_regs.{name}");
        }
        for spec in volguard_common::event::SYSCALLS {
            let function = format!("{}{}", volguard_common::programs::SYSCALL_FUNCTION_PREFIX, spec.name);
            let optional = spec.name == "open_tree_attr"; // Linux 6.15
            assert!(optional || btf.has_function(&function), "no {function} in this kernel's BTF");
        }
        assert!(!btf.has_function("__x64_sys_no_such_call"));
    }
}
