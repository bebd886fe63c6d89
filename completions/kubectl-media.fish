# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_kubectl_media_global_optspecs
    string join \n color= kubeconfig= context= n/namespace= A/all-namespaces request-timeout= h/help V/version
end

function __fish_kubectl_media_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_kubectl_media_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_kubectl_media_using_subcommand
    set -l cmd (__fish_kubectl_media_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -l color -d 'When to colour output: auto colours a terminal unless NO_COLOR is set' -r -f -a "auto\t'Colour when writing to a terminal and `NO_COLOR` is not set'
always\t'Colour even when writing to a pipe or file'
never\t'Never colour'"
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -l kubeconfig -d 'Path to the kubeconfig file [default: KUBECONFIG, then ~/.kube/config]' -r -F
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -l context -d 'The kubeconfig context to use' -r
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -s n -l namespace -d 'The namespace to read namespaced objects from [default: the context\'s namespace, else default]' -r
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -l request-timeout -d 'How long to wait for each API request: 0 waits indefinitely; else 30s, 1m, 500ms...' -r
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -s A -l all-namespaces -d 'Read namespaced objects from every namespace; overrides --namespace, as in kubectl'
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -s V -l version -d 'Print version'
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -f -a "caps" -d 'List what every GPU\'s driver states, beside liken\'s render nodes'
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -f -a "class" -d 'Write a DeviceClass (and claim template) that selects GPUs by capability'
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -f -a "__complete" -d 'Answer kubectl\'s shell completion requests (run by the kubectl_complete-media shim)'
complete -c kubectl-media -n "__fish_kubectl_media_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -s f -l filename -d 'Read objects from this file instead of the cluster (kubectl get -o yaml|json output, Lists, multi-document YAML); repeat for several, - for standard input' -r -F
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -l node -d 'Only the GPUs of this node; repeat or give a comma list' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -l decode -d 'A decode capability the GPU must state; repeat or give a comma list' -r -f -a "AV1Main\t'decodes AV1 Main profile (8-bit 4:2:0) in hardware'
AV1Main10\t'decodes 10-bit AV1 Main profile in hardware'
H264\t'decodes H.264 up to High profile in hardware'
HEVCMain\t'decodes HEVC Main profile (8-bit 4:2:0) in hardware'
HEVCMain10\t'decodes HEVC Main 10 profile (10-bit 4:2:0) in hardware'
MPEG2\t'decodes MPEG-2 Main profile in hardware'
VC1\t'decodes VC-1 Advanced profile in hardware'
VP8\t'decodes VP8 in hardware'
VP9\t'decodes VP9 profile 0 (8-bit 4:2:0) in hardware'
VP9Profile2\t'decodes VP9 profile 2 (10-bit 4:2:0) in hardware'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -l encode -d 'An encode capability the GPU must state; repeat or give a comma list' -r -f -a "H264\t'encodes 8-bit H.264 on the full encoder (EncSlice)'
H264LowPower\t'encodes 8-bit H.264 on the low-power encoder (EncSliceLP)'
HEVCMain\t'encodes 8-bit HEVC Main on the full encoder (EncSlice)'
HEVCMain10\t'encodes 10-bit HEVC Main 10 on the full encoder (EncSlice)'
HEVCMain10LowPower\t'encodes 10-bit HEVC Main 10 on the low-power encoder (EncSliceLP)'
HEVCMainLowPower\t'encodes 8-bit HEVC Main on the low-power encoder (EncSliceLP)'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -l scale -d 'A bit depth the GPU\'s video processor must scale; repeat or give a comma list' -r -f -a "8bit\t'scales and converts 8-bit (NV12) frames on the video processor'
10bit\t'scales and converts 10-bit (P010) frames on the video processor'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -s o -l output -d 'Output format: wide adds one column per capability; json and yaml print one record per GPU with every attribute' -r -f -a "wide\t'The table plus one column per capability'
json\t'One JSON record per GPU'
yaml\t'One YAML record per GPU'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -l color -d 'When to colour output: auto colours a terminal unless NO_COLOR is set' -r -f -a "auto\t'Colour when writing to a terminal and `NO_COLOR` is not set'
always\t'Colour even when writing to a pipe or file'
never\t'Never colour'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -l kubeconfig -d 'Path to the kubeconfig file [default: KUBECONFIG, then ~/.kube/config]' -r -F
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -l context -d 'The kubeconfig context to use' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -s n -l namespace -d 'The namespace to read namespaced objects from [default: the context\'s namespace, else default]' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -l request-timeout -d 'How long to wait for each API request: 0 waits indefinitely; else 30s, 1m, 500ms...' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -l summary -d 'Per capability, how many GPUs and nodes state it; then the models that drift'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -l no-headers -d 'Print no header row and no notes below the table'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -s A -l all-namespaces -d 'Read namespaced objects from every namespace; overrides --namespace, as in kubectl'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand caps" -s V -l version -d 'Print version'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l decode -d 'A decode capability the GPU must state; repeat or give a comma list' -r -f -a "AV1Main\t'decodes AV1 Main profile (8-bit 4:2:0) in hardware'
AV1Main10\t'decodes 10-bit AV1 Main profile in hardware'
H264\t'decodes H.264 up to High profile in hardware'
HEVCMain\t'decodes HEVC Main profile (8-bit 4:2:0) in hardware'
HEVCMain10\t'decodes HEVC Main 10 profile (10-bit 4:2:0) in hardware'
MPEG2\t'decodes MPEG-2 Main profile in hardware'
VC1\t'decodes VC-1 Advanced profile in hardware'
VP8\t'decodes VP8 in hardware'
VP9\t'decodes VP9 profile 0 (8-bit 4:2:0) in hardware'
VP9Profile2\t'decodes VP9 profile 2 (10-bit 4:2:0) in hardware'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l encode -d 'An encode capability the GPU must state; repeat or give a comma list' -r -f -a "H264\t'encodes 8-bit H.264 on the full encoder (EncSlice)'
H264LowPower\t'encodes 8-bit H.264 on the low-power encoder (EncSliceLP)'
HEVCMain\t'encodes 8-bit HEVC Main on the full encoder (EncSlice)'
HEVCMain10\t'encodes 10-bit HEVC Main 10 on the full encoder (EncSlice)'
HEVCMain10LowPower\t'encodes 10-bit HEVC Main 10 on the low-power encoder (EncSliceLP)'
HEVCMainLowPower\t'encodes 8-bit HEVC Main on the low-power encoder (EncSliceLP)'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l scale -d 'A bit depth the GPU\'s video processor must scale; repeat or give a comma list' -r -f -a "8bit\t'scales and converts 8-bit (NV12) frames on the video processor'
10bit\t'scales and converts 10-bit (P010) frames on the video processor'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l claim -d 'Also print the ResourceClaimTemplate that claims the render node and this class\'s device on one GPU; named TEMPLATE, or after the class. Write --claim=TEMPLATE before NAME' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l render-class -d 'The class of the liken render nodes the template claims [default: gpu-render]' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l base-class -d 'The class of every media.liken.sh device that --selector narrows [default: media-gpu]' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -s o -l output -d 'Output format' -r -f -a "yaml\t'Multi-document YAML, for `kubectl apply -f -`'
json\t'One JSON `List` of the objects'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l color -d 'When to colour output: auto colours a terminal unless NO_COLOR is set' -r -f -a "auto\t'Colour when writing to a terminal and `NO_COLOR` is not set'
always\t'Colour even when writing to a pipe or file'
never\t'Never colour'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l kubeconfig -d 'Path to the kubeconfig file [default: KUBECONFIG, then ~/.kube/config]' -r -F
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l context -d 'The kubeconfig context to use' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -s n -l namespace -d 'The namespace to read namespaced objects from [default: the context\'s namespace, else default]' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l request-timeout -d 'How long to wait for each API request: 0 waits indefinitely; else 30s, 1m, 500ms...' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l with-render-class -d 'Also print the render-node class (skip it when you have one, e.g. display-render)'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l selector -d 'Print no class: the template\'s request narrows the base class with CEL selectors'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -l with-base-class -d 'Also print the base class (device.driver == "media.liken.sh")'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -s A -l all-namespaces -d 'Read namespaced objects from every namespace; overrides --namespace, as in kubectl'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand class" -s V -l version -d 'Print version'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand __complete" -l color -d 'When to colour output: auto colours a terminal unless NO_COLOR is set' -r -f -a "auto\t'Colour when writing to a terminal and `NO_COLOR` is not set'
always\t'Colour even when writing to a pipe or file'
never\t'Never colour'"
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand __complete" -l kubeconfig -d 'Path to the kubeconfig file [default: KUBECONFIG, then ~/.kube/config]' -r -F
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand __complete" -l context -d 'The kubeconfig context to use' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand __complete" -s n -l namespace -d 'The namespace to read namespaced objects from [default: the context\'s namespace, else default]' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand __complete" -l request-timeout -d 'How long to wait for each API request: 0 waits indefinitely; else 30s, 1m, 500ms...' -r
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand __complete" -s A -l all-namespaces -d 'Read namespaced objects from every namespace; overrides --namespace, as in kubectl'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand __complete" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand __complete" -s V -l version -d 'Print version'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand help; and not __fish_seen_subcommand_from caps class __complete help" -f -a "caps" -d 'List what every GPU\'s driver states, beside liken\'s render nodes'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand help; and not __fish_seen_subcommand_from caps class __complete help" -f -a "class" -d 'Write a DeviceClass (and claim template) that selects GPUs by capability'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand help; and not __fish_seen_subcommand_from caps class __complete help" -f -a "__complete" -d 'Answer kubectl\'s shell completion requests (run by the kubectl_complete-media shim)'
complete -c kubectl-media -n "__fish_kubectl_media_using_subcommand help; and not __fish_seen_subcommand_from caps class __complete help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
