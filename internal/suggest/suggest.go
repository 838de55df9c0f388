// Package suggest finds the name a misspelt one was likely meant to be, for
// "did you mean" in error messages. The configuration parser and the CLI
// share it, so that both judge a typo alike.
package suggest

import "strings"

// Nearest returns the candidate nearest to name by edit distance (ignoring
// case), or "" when none is near enough to be a likely typo: within a
// quarter of the candidate's length, and at least 2 edits allowed. Of
// equally near candidates the first wins.
func Nearest(name string, candidates []string) string {
	best, bestDist := "", -1
	lower := strings.ToLower(name)
	for _, c := range candidates {
		d := Distance(lower, strings.ToLower(c))
		if d > max(2, len(c)/4) {
			continue
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// Within reports whether name is within most edits of one of candidates,
// ignoring case.
func Within(name string, candidates []string, most int) bool {
	lower := strings.ToLower(name)
	n := len([]rune(lower))
	for _, c := range candidates {
		c = strings.ToLower(c)
		if d := len([]rune(c)) - n; d > most || -d > most {
			continue // the lengths alone differ by more
		}
		if Distance(lower, c) <= most {
			return true
		}
	}
	return false
}

// Distance is the Levenshtein distance between a and b, in runes.
func Distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
