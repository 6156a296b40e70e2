package dedup

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// markdownLink is an inline link's target: [text](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// citation is a file of this repository named in code, a script or a
// deploy file: a page of docs/, a script, a deploy file, the model.
var citation = regexp.MustCompile(`\b(docs|deploy|scripts|model)/[A-Za-z0-9_./-]+\.(md|sh|yml|json|service|timer|env|pml)\b`)

// headingSlugs are the anchors GitHub makes of a Markdown file's headings.
func headingSlugs(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	slugs := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var s strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				s.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				s.WriteRune(r)
			}
		}
		slugs[s.String()] = true
	}
	return slugs
}

// TestEveryLinkInTheDocsResolves walks README.md and docs/ and fails on a
// relative link whose file does not exist, or whose #anchor names no
// heading of the page it points to.
func TestEveryLinkInTheDocsResolves(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md")
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s: %v", page, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !headingSlugs(t, path)[anchor] {
				t.Errorf("%s links to %s: %s has no heading #%s", page, target, path, anchor)
			}
		}
	}
}

// TestEveryCitedFileExists fails on a file of docs/, deploy/, scripts/ or
// model/ named in a Go comment, a script or a deploy file (an alert rule's
// annotation) that does not exist.
func TestEveryCitedFileExists(t *testing.T) {
	cited := 0
	for _, root := range []string{".", "deploy", "scripts"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if root == "." && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "deploy" || d.Name() == "scripts" || d.Name() == "docs") {
					return filepath.SkipDir
				}
				return nil
			}
			if root == "." && !strings.HasSuffix(path, ".go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, doc := range citation.FindAllString(string(b), -1) {
				cited++
				if _, err := os.Stat(doc); err != nil {
					t.Errorf("%s cites %s, which does not exist", path, doc)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if cited == 0 {
		t.Fatal("no file cited anywhere: the walk read nothing")
	}
}
