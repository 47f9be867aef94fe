package testutil

import (
	"bufio"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ExecutableResidence is which of a process's executable pages are
// resident, attributed to the Go packages whose code and data lie in
// them: where the file-backed part of a Go program's RSS comes from.
type ExecutableResidence struct {
	// Executable is the path of the process's executable.
	Executable string
	// File is the resident bytes of the executable's mappings that are
	// still file pages (what RssFile counts of them); Anon the pages of
	// those mappings written since (the data segment's copied pages).
	File, Anon int64
	// Packages are the file bytes by package, largest first: a page
	// several symbols share is split by how many of its bytes each holds,
	// and bytes no symbol covers go to the section's name in brackets
	// ("[.gopclntab]").
	Packages []PackageBytes
}

// PackageBytes is one package's share of ExecutableResidence.File.
type PackageBytes struct {
	Package string
	Bytes   int64
}

// ResidentExecutable reads /proc/PID/maps and /proc/PID/pagemap for the
// mappings of the process's executable and attributes each resident page
// to the symbols in it, from the executable's own symbol table (a binary
// built with -ldflags=-s has none: build one without it, which places
// every section at the same address). Root, or the process's owner, may
// read the present bits.
func ResidentExecutable(pid int) (ExecutableResidence, error) {
	proc := fmt.Sprintf("/proc/%d", pid)
	exe, err := os.Readlink(proc + "/exe")
	if err != nil {
		return ExecutableResidence{}, err
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	ranges, err := executableMappings(proc+"/maps", exe)
	if err != nil {
		return ExecutableResidence{}, err
	}
	f, err := elf.Open(proc + "/exe")
	if err != nil {
		return ExecutableResidence{}, fmt.Errorf("%s: %w", exe, err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return ExecutableResidence{}, fmt.Errorf("%s has no symbol table (built with -ldflags=-s?): %w", exe, err)
	}
	spans := symbolSpans(syms, f.Sections)
	pm, err := os.Open(proc + "/pagemap")
	if err != nil {
		return ExecutableResidence{}, err
	}
	defer pm.Close()
	page := uint64(os.Getpagesize())
	out := ExecutableResidence{Executable: exe}
	by := map[string]float64{}
	for _, r := range ranges {
		// One 8-byte entry per page of the mapping, read in one go.
		entries := make([]byte, (r.end-r.start)/page*8)
		if _, err := pm.ReadAt(entries, int64(r.start/page*8)); err != nil && err != io.EOF {
			return ExecutableResidence{}, fmt.Errorf("%s/pagemap at %#x: %w", proc, r.start, err)
		}
		for i := 0; i < len(entries); i += 8 {
			addr := r.start + uint64(i/8)*page
			e := binary.LittleEndian.Uint64(entries[i:])
			if e&(1<<63) == 0 {
				continue
			}
			if e&(1<<61) == 0 {
				out.Anon += int64(page)
				continue
			}
			out.File += int64(page)
			attribute(spans, addr, addr+page, by)
		}
	}
	for pkg, b := range by {
		out.Packages = append(out.Packages, PackageBytes{Package: pkg, Bytes: int64(b + 0.5)})
	}
	slices.SortFunc(out.Packages, func(a, b PackageBytes) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Package, b.Package))
	})
	return out, nil
}

// addrRange is one mapping, [start, end).
type addrRange struct{ start, end uint64 }

// executableMappings reads the ranges of a maps file mapped from path.
func executableMappings(maps, path string) ([]addrRange, error) {
	fh, err := os.Open(maps)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var out []addrRange
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.TrimSuffix(strings.Join(fields[5:], " "), " (deleted)") != path {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("%s: cannot read range %q", maps, fields[0])
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: cannot read range %q", maps, fields[0])
		}
		out = append(out, addrRange{start, end})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s maps nothing from %s", maps, path)
	}
	return out, nil
}

// span is an address range [start, end) owned by a package (or a section
// name in brackets).
type span struct {
	start, end uint64
	owner      string
}

// symbolSpans turns the symbol table into sorted, non-overlapping spans,
// with the gaps inside each allocated section given to the section.
func symbolSpans(syms []elf.Symbol, sections []*elf.Section) []span {
	var sp []span
	for _, s := range syms {
		if s.Size == 0 || elf.ST_TYPE(s.Info) == elf.STT_SECTION || elf.ST_TYPE(s.Info) == elf.STT_FILE {
			continue
		}
		sp = append(sp, span{s.Value, s.Value + s.Size, SymbolPackage(s.Name)})
	}
	slices.SortFunc(sp, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	// Overlaps (aliases) keep the first.
	kept := sp[:0]
	for _, s := range sp {
		if n := len(kept); n > 0 && s.start < kept[n-1].end {
			if s.end <= kept[n-1].end {
				continue
			}
			s.start = kept[n-1].end
		}
		kept = append(kept, s)
	}
	var gaps []span
	for _, sec := range sections {
		if sec.Flags&elf.SHF_ALLOC == 0 || sec.Addr == 0 {
			continue
		}
		lo, hi := sec.Addr, sec.Addr+sec.Size
		i, _ := slices.BinarySearchFunc(kept, lo, func(s span, a uint64) int { return cmp.Compare(s.end, a+1) })
		at := lo
		for ; i < len(kept) && kept[i].start < hi; i++ {
			if kept[i].start > at {
				gaps = append(gaps, span{at, kept[i].start, "[" + sec.Name + "]"})
			}
			at = max(at, kept[i].end)
		}
		if at < hi {
			gaps = append(gaps, span{at, hi, "[" + sec.Name + "]"})
		}
	}
	all := append(kept, gaps...)
	slices.SortFunc(all, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	return all
}

// attribute adds to by each owner's share of the bytes [lo, hi).
func attribute(spans []span, lo, hi uint64, by map[string]float64) {
	i, _ := slices.BinarySearchFunc(spans, lo, func(s span, a uint64) int { return cmp.Compare(s.end, a+1) })
	covered := uint64(0)
	for ; i < len(spans) && spans[i].start < hi; i++ {
		n := min(hi, spans[i].end) - max(lo, spans[i].start)
		by[spans[i].owner] += float64(n)
		covered += n
	}
	if covered < hi-lo {
		by["[outside any section]"] += float64(hi - lo - covered)
	}
}

// SymbolPackage is the Go package a linker symbol belongs to:
// "k8s.io/api/apps/v1" for "k8s.io/api/apps/v1.(*Deployment).Reset" and
// for "type:*k8s.io/api/apps/v1.Deployment"; symbols of no package keep
// their kind in brackets ("[go:string]").
func SymbolPackage(name string) string {
	for _, p := range []string{"type:.eq.", "type:.hash.", "type:", "go:itab.", "go:info.", "go:cuinfo.", "gclocals·", "go:link."} {
		if strings.HasPrefix(name, p) {
			name = name[len(p):]
			break
		}
	}
	name = strings.TrimLeft(name, "*[]")
	if rest, ok := strings.CutPrefix(name, "go:"); ok {
		kind, _, _ := strings.Cut(rest, ".")
		return "[go:" + kind + "]"
	}
	if strings.HasPrefix(name, "go.") {
		return "[go]"
	}
	slash := strings.LastIndex(name, "/")
	if dot := strings.IndexByte(name[slash+1:], '.'); dot >= 0 {
		return name[:slash+1+dot]
	}
	return "[" + name + "]"
}

// ModuleOf groups a package path by its module-like root: the first
// three path elements of a host-named path ("github.com/a/b/c" is
// "github.com/a/b", and client-go's parts stay apart:
// "k8s.io/client-go/kubernetes"), two for the hosts whose modules sit
// right under them ("k8s.io/api/apps/v1" is "k8s.io/api"), the standard
// library's first element ("net/http" is "net").
func ModuleOf(pkg string) string {
	parts := strings.Split(pkg, "/")
	n := 3
	switch {
	case !strings.Contains(parts[0], "."):
		n = 1
	case len(parts) > 1 && parts[0] == "k8s.io" && parts[1] == "client-go":
	case parts[0] == "k8s.io", parts[0] == "sigs.k8s.io", parts[0] == "google.golang.org", parts[0] == "go.uber.org":
		n = 2
	}
	return strings.Join(parts[:min(n, len(parts))], "/")
}
