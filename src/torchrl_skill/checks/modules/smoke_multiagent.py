"""Smoke-test TorchRL multi-agent models on CPU: MultiAgentMLP for every centralized/share_params pair, MultiAgentConvNet, nested agent keys.

For each of the four MultiAgentMLP settings, on input [B, n_agents, n_agent_inputs]:
the output is [B, n_agents, n_agent_outputs]; perturbing agent 0's input changes agent
1's output only when centralized=True; with share_params=True two agents fed the same
input get the same output and the parameter count is 1/n_agents of the unshared one
(centralized=True plus share_params=True gives every agent the same output). Also runs
a MultiAgentConvNet ([B, n_agents, C, H, W] -> [B, n_agents, F]) and a TensorDictModule
policy on the nested key ("agents", "observation") whose sub-TensorDict has batch
[B, n_agents].
"""

from __future__ import annotations

import functools

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/modules-and-policies/scripts/smoke_multiagent.py --agents 4 --json"
BATCH, N_IN, N_OUT = 5, 6, 2


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--agents", type=sr.int_at_least(2), default=3, help="number of agents (default: 3)")
    return parser


def make_mlp(n_agents: int, centralized: bool, share_params: bool):
    """MultiAgentMLP: [*B, n_agents, 6] -> [*B, n_agents, 2], depth 2, 16 cells, seeded."""
    import torch
    from torchrl.modules import MultiAgentMLP

    torch.manual_seed(0)
    return MultiAgentMLP(
        n_agent_inputs=N_IN,
        n_agent_outputs=N_OUT,
        n_agents=n_agents,
        centralized=centralized,
        share_params=share_params,
        depth=2,
        num_cells=16,
    )


def mlp_properties(n_agents: int, centralized: bool, share_params: bool) -> dict:
    """Measured behaviour of one MultiAgentMLP setting.

    Returns ``shape`` (output shape list), ``mixes`` (agent 1's output moves when only
    agent 0's input moves), ``same_input_same_output`` (agents 0 and 1 fed equal inputs
    give equal outputs), ``all_equal`` (all agents' outputs equal on random input) and
    ``n_params``.
    """
    import torch

    net = make_mlp(n_agents, centralized, share_params)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, n_agents, N_IN, generator=g)
    with torch.no_grad():
        y = net(x)
        x0 = x.clone()
        x0[:, 0] += 1.0
        y0 = net(x0)
        xs = x.clone()
        xs[:, 1] = xs[:, 0]
        ys = net(xs)
    return {
        "shape": list(y.shape),
        "mixes": not torch.allclose(y[:, 1], y0[:, 1]),
        "same_input_same_output": torch.allclose(ys[:, 0], ys[:, 1]),
        "all_equal": all(torch.allclose(y[:, 0], y[:, i]) for i in range(1, n_agents)),
        "n_params": sum(p.numel() for p in net.parameters()),
    }


def check_mlp(args, *, centralized: bool, share_params: bool) -> str:
    """One centralized/share_params setting behaves as the table in recurrent-and-multiagent.md says."""
    n_agents = args.agents
    props = mlp_properties(n_agents, centralized, share_params)
    unshared = mlp_properties(n_agents, centralized, False)["n_params"] if share_params else props["n_params"]
    want = [BATCH, n_agents, N_OUT]
    sr.expect(props["shape"] == want, f"output shape {props['shape']}, expected {want}")
    sr.expect(
        props["mixes"] == centralized,
        f"perturbing agent 0 {'did not change' if centralized else 'changed'} agent 1's output with centralized={centralized}",
    )
    sr.expect(
        props["same_input_same_output"] == share_params,
        f"equal inputs gave {'different' if share_params else 'equal'} outputs with share_params={share_params}",
    )
    if share_params:
        sr.expect(props["n_params"] * n_agents == unshared, f"{props['n_params']} shared params vs {unshared} unshared")
    sr.expect(props["all_equal"] == (centralized and share_params), f"all agents equal: {props['all_equal']}")
    sr.evidence(BATCH * n_agents, "agent rows checked")
    return (
        f"[{BATCH}, {n_agents}, {N_IN}] -> {props['shape']}; agent0 perturbation reaches agent1: {props['mixes']}; "
        f"equal inputs -> equal outputs: {props['same_input_same_output']}; {props['n_params']} params"
    )


def check_convnet(args) -> str:
    import torch
    from torchrl.modules import MultiAgentConvNet

    n_agents = args.agents
    torch.manual_seed(0)
    net = MultiAgentConvNet(
        n_agents=n_agents, centralized=False, share_params=True, in_features=2, num_cells=[4], kernel_sizes=3, strides=1
    )
    with torch.no_grad():
        y = net(torch.randn(BATCH, n_agents, 2, 8, 8))
    sr.expect(y.shape[:2] == torch.Size([BATCH, n_agents]) and y.ndim == 3, f"output {list(y.shape)}")
    sr.evidence(BATCH * n_agents, "agent rows checked")
    return f"MultiAgentConvNet: [{BATCH}, {n_agents}, 2, 8, 8] -> {list(y.shape)} (conv features flattened per agent)"


def check_nested_keys(args) -> str:
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule

    n_agents = args.agents
    net = make_mlp(n_agents, centralized=False, share_params=True)
    policy = TensorDictModule(net, in_keys=[("agents", "observation")], out_keys=[("agents", "action")])
    td = TensorDict(
        {"agents": TensorDict({"observation": torch.randn(BATCH, n_agents, N_IN)}, batch_size=[BATCH, n_agents])},
        batch_size=[BATCH],
    )
    out = policy(td)
    sr.expect(out["agents"].batch_size == torch.Size([BATCH, n_agents]), f'("agents",) batch {list(out["agents"].batch_size)}')
    sr.expect(out["agents", "action"].shape == torch.Size([BATCH, n_agents, N_OUT]), f'action {list(out["agents", "action"].shape)}')
    sr.evidence(BATCH * n_agents, "agent rows checked")
    return f'("agents", "observation") [{BATCH}, {n_agents}, {N_IN}] -> ("agents", "action") [{BATCH}, {n_agents}, {N_OUT}]; group batch [{BATCH}, {n_agents}]'


CHECKS = [
    sr.Check(f"mlp:centralized={c},share_params={p}", functools.partial(check_mlp, centralized=c, share_params=p),
             proves=f"MultiAgentMLP(centralized={c}, share_params={p}) mixes agents and shares weights as documented")
    for c in (False, True)
    for p in (False, True)
] + [
    sr.Check("convnet:shape", check_convnet, proves="MultiAgentConvNet gives one feature row per agent"),
    sr.Check("keys:nested-agent-group", check_nested_keys, proves="a module on nested ('agents', ...) keys keeps the group batch"),
]


def run_checks(args, report: sr.Report) -> None:
    sr.run_declared(CHECKS, report, args=args)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
