# fish completion for kubectl-media.
#
# Every answer comes from `kubectl-media __complete WORDS... CURRENT`, the same request kubectl
# makes through the kubectl_complete-media shim for `kubectl media <TAB>`. The answer is one
# candidate per line (`value<TAB>description`, which is also fish's own format) and a last line
# `:DIRECTIVE` with Cobra's bits: 1 error, 2 no space after the word, 4 no file names, 8 file
# names with the extensions the candidates list (`--for` offers media files).
#
# Install: copy to ~/.config/fish/completions/kubectl-media.fish.

function __kubectl_media_complete
    set -l words (commandline --tokenize --cut-at-cursor --current-process)
    set -l current (commandline --current-token --cut-at-cursor)
    set -l out ($words[1] __complete $words[2..-1] $current 2>/dev/null)
    or return
    set -l directive (string replace --regex '^:' '' -- $out[-1])
    string match --quiet --regex '^[0-9]+$' -- $directive; or return
    test (math "bitand($directive, 1)") -eq 0; or return
    set -e out[-1]
    if test (math "bitand($directive, 8)") -ne 0
        # Directories to walk into, and the files with one of the listed extensions.
        # __fish_complete_path ends each path with a tab (and a description, if any).
        set -l pattern '(/|\\.('(string join '|' -- $out)'))(\t.*)?$'
        __fish_complete_path $current | string match --regex --entire -- $pattern
        return
    end
    if test (count $out) -eq 0
        if test (math "bitand($directive, 4)") -eq 0
            __fish_complete_path $current
        end
        return
    end
    printf '%s\n' $out
end

complete --command kubectl-media --no-files --keep-order --arguments '(__kubectl_media_complete)'
