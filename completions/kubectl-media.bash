# bash completion for kubectl-media.
#
# Every answer comes from `kubectl-media __complete WORDS... CURRENT`, the same request kubectl
# makes through the kubectl_complete-media shim for `kubectl media <TAB>`, so flags, subcommands
# and capability values complete the same way in both, from the program's own definitions.
# The answer is one candidate per line (`value<TAB>description`) and a last line `:DIRECTIVE`
# with Cobra's bits: 1 error, 2 no space after the word, 4 no file names, 8 file names with the
# extensions the candidates list (`--for` offers media files).
#
# Install: source this file from ~/.bashrc, or copy it to
# /usr/share/bash-completion/completions/kubectl-media.

_kubectl_media() {
    local cur=${COMP_WORDS[COMP_CWORD]}
    local -a args=()
    local i word
    # bash splits `--decode=HEV` into `--decode`, `=`, `HEV` (COMP_WORDBREAKS); the program wants
    # the word as typed, so glue those pieces back together.
    for ((i = 1; i <= COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        if [[ ${#args[@]} -gt 0 && ( $word == "=" || ${COMP_WORDS[i - 1]} == "=" ) ]]; then
            args[${#args[@]} - 1]+=$word
        else
            args+=("$word")
        fi
    done
    local current=${args[${#args[@]} - 1]}
    # What bash will replace is only the part after the last `=` it split at.
    local glued=${current%"$cur"}

    local out
    out=$("${COMP_WORDS[0]}" __complete "${args[@]}" 2>/dev/null) || return
    local directive=${out##*:}
    [[ $directive =~ ^[0-9]+$ ]] || return
    (( directive & 1 )) && return

    COMPREPLY=()
    local line value
    if (( directive & 8 )); then
        # Directories to walk into, and the files with one of the listed extensions.
        compopt -o filenames 2>/dev/null
        local IFS=$'\n' extension
        COMPREPLY=($(compgen -d -- "$cur"))
        while IFS= read -r extension; do
            [[ -z $extension || $extension == :* ]] && continue
            COMPREPLY+=($(compgen -f -X "!*.$extension" -- "$cur"))
        done <<<"$out"
        return
    fi
    while IFS= read -r line; do
        [[ $line == :* ]] && continue
        value=${line%%$'\t'*}
        COMPREPLY+=("${value#"$glued"}")
    done <<<"$out"

    if [[ ${#COMPREPLY[@]} -eq 0 ]] && (( (directive & 4) == 0 )); then
        compopt -o filenames 2>/dev/null
        local IFS=$'\n'
        COMPREPLY=($(compgen -f -- "$cur"))
        return
    fi
    if (( directive & 2 )); then
        compopt -o nospace 2>/dev/null
    fi
}

complete -F _kubectl_media kubectl-media
