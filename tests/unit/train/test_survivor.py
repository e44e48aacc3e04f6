"""The survivors' just-in-time save in one process: whose state goes into which rank's file, the staging copy
and its first-rename-wins, and when a survivor refuses to save (tests/integration/test_train_survivor.py kills
real ranks under torchrun)."""

from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest

pytestmark = [pytest.mark.torch]


@pytest.fixture(autouse=True, scope="module")
def _torch_imported():
    """torch loads when these tests run, not at collection (tests/conftest.py, the torch marker)."""
    global torch, dist, CheckpointManager, rng_state, SurvivorSave, extras_for_ranks, node_lock_path, same_state
    global take_node_lock
    import torch
    import torch.distributed as dist

    from burstd.train.checkpoint import CheckpointManager, rng_state
    from burstd.train.survivor import SurvivorSave, extras_for_ranks, node_lock_path, same_state, take_node_lock

GLOO_CLOSED = "[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:39079"


class Position:
    def __init__(self, position: int = 0):
        self.position = position

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


def _setup(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched, Position()


def _train(model, opt, sched, pos, steps, after_step=None):
    for _ in range(steps):
        x = torch.randn(3, 4) + float(np.random.rand())
        loss = (model(x) ** 2).mean() * (1 + random.random())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        pos.position += 1
        if after_step:
            after_step(pos.position)


def _params(model, opt):
    return [p.detach().clone() for p in model.parameters()] + [
        v.clone() for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]


def test_same_state_compares_tensors_by_value_and_containers_item_by_item():
    a = {"t": torch.arange(3), "l": [1, (2, 3)], "n": np.arange(2)}
    assert same_state(a, {"t": torch.arange(3), "l": [1, (2, 3)], "n": np.arange(2)})
    assert not same_state(a, {"t": torch.arange(3).float(), "l": [1, (2, 3)], "n": np.arange(2)})
    assert not same_state(a, {"t": torch.arange(3), "l": [1, [2, 3]], "n": np.arange(2)})
    assert not same_state(a, {"t": torch.arange(3), "l": [1, (2, 3)], "n": np.arange(3)})
    assert not same_state({"t": torch.zeros(1)}, {"t": 0})


def test_what_every_rank_shares_comes_from_the_writer_and_what_differs_from_each_ranks_copy():
    # replicas: sent before the optimizer step (the scheduler had not stepped yet); own: the writer's end of step
    replicas = [{"rng": {"seed": r}, "stateful": {"sched": {"last_epoch": 4}, "data": {"position": 10 * r}}}
                for r in range(3)]
    own = {"rng": {"seed": "mine"}, "stateful": {"sched": {"last_epoch": 5}, "data": {"position": 10}}}
    extras = extras_for_ranks(replicas, own, me=1, step=5)
    assert [e["step"] for e in extras] == [5, 5, 5]
    assert extras[1] == {"step": 5, "rng": {"seed": "mine"}, "stateful": own["stateful"]}  # the writer's own
    assert extras[0]["rng"] == {"seed": 0} and extras[2]["rng"] == {"seed": 2}  # per-rank RNG: each its own
    assert extras[0]["stateful"] == {"sched": {"last_epoch": 5}, "data": {"position": 0}}  # shared: the writer's
    assert extras[2]["stateful"] == {"sched": {"last_epoch": 5}, "data": {"position": 20}}
    # RNG the same on every rank: the writer's end-of-step state for all of them
    same_rng = [dict(r, rng={"seed": 0}) for r in replicas]
    assert all(e["rng"] == {"seed": "mine"} for e in extras_for_ranks(same_rng, own, me=0, step=5))
    with pytest.raises(ValueError, match="rank 3 is not one of the 3 ranks"):
        extras_for_ranks(replicas, own, me=3, step=5)


def test_a_survivor_copy_resumes_every_rank_exactly_and_the_first_copy_wins(tmp_path):
    model, opt, sched, pos = _setup()
    mgr = CheckpointManager(tmp_path, model, opt, stateful={"sched": sched, "data": pos})
    _train(model, opt, sched, pos, 3)
    own = {"rng": rng_state(), "stateful": {"sched": sched.state_dict(), "data": pos.state_dict()}}
    other = {"rng": rng_state(), "stateful": {"sched": sched.state_dict(), "data": {"position": 3}}}
    other["rng"]["torch"] = torch.Generator().manual_seed(42).get_state()  # rank 1 had its own stream
    extras = extras_for_ranks([own, other], own, me=0, step=3)
    assert mgr.save_survivor_copy(3, extras, tag="r0")
    _train(model, opt, sched, pos, 4)  # the uninterrupted continuation
    expected = _params(model, opt)

    # a second survivor's copy of the same step never replaces the first, and leaves nothing behind
    assert not mgr.save_survivor_copy(3, extras_for_ranks([own, other], other, me=1, step=3), tag="r1")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("step-")) == ["step-000000003"]
    manifest = json.loads((tmp_path / "step-000000003" / "burstd-checkpoint.json").read_text())
    assert manifest["reason"] == "jit" and manifest["world_size"] == 2 and manifest["saved_by_rank"] == 0
    rank1 = torch.load(tmp_path / "step-000000003" / "extra-rank00001.pt", weights_only=True)
    assert torch.equal(rank1["rng"]["torch"], other["rng"]["torch"]) and rank1["stateful"]["data"] == {"position": 3}

    # a survivor killed while writing leaves a staging folder: torn, removed on resume
    (tmp_path / "step-000000004.partial-r2").mkdir()
    model2, opt2, sched2, pos2 = _setup(seed=9)
    mgr2 = CheckpointManager(tmp_path, model2, opt2, stateful={"sched": sched2, "data": pos2})
    assert mgr2.resume() == 3 and pos2.position == 3
    assert not (tmp_path / "step-000000004.partial-r2").exists()
    _train(model2, opt2, sched2, pos2, 4)
    assert all(torch.equal(a, b) for a, b in zip(expected, _params(model2, opt2)))


def test_one_writer_a_node_per_step(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    env = {"SLURM_JOB_ID": "7", "MASTER_PORT": "29507"}
    path = node_lock_path("/ckpt/run", 5, env)
    assert path == node_lock_path("/ckpt/run", 5, dict(env)) and path.startswith(str(tmp_path))
    assert path != node_lock_path("/ckpt/run", 6, env) != node_lock_path("/ckpt/other", 5, env)
    assert take_node_lock(path)
    assert not take_node_lock(path)  # another open of the file: another process, as far as flock is concerned


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_survivor_saves_the_last_completed_step_and_refuses_when_the_model_moved_past_it(tmp_path, monkeypatch,
                                                                                         one_rank_group):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    model, opt, sched, pos = _setup()
    mgr = CheckpointManager(tmp_path / "ckpt", model, opt, stateful={"sched": sched, "data": pos})
    survivor = SurvivorSave(mgr, [opt], exit_code=85)
    survivor.started(0)
    assert survivor.on_peer_loss(RuntimeError(GLOO_CLOSED)) == 85 and survivor.saved == 0  # nothing to lose yet

    _train(model, opt, sched, pos, 2, after_step=survivor.step_done)
    assert survivor.replicas_end == 2 and survivor.why_not() is None
    # each rank's state went through one fixed-size exchange, grown to fit it on the first step
    assert survivor._capacity >= len(survivor.replicas[0]) > 1000
    assert pickle.loads(survivor.replicas[0])["stateful"]["sched"]["last_epoch"] == 1  # sent before the 2nd step
    assert survivor.on_peer_loss(RuntimeError("shape mismatch")) is None  # a bug is re-raised, not saved

    # the optimizer stepped again, step_done not yet called: the model is past step 2, nothing consistent
    (model(torch.randn(3, 4)) ** 2).mean().backward()
    opt.step()
    assert "stepped past step 2" in (survivor.why_not() or "")
    assert survivor.on_peer_loss(RuntimeError(GLOO_CLOSED)) is None
    assert not (tmp_path / "ckpt" / "step-000000002").exists()

    sched.step()
    pos.position += 1
    survivor.step_done(3)
    assert survivor.why_not() is None
    assert survivor.on_peer_loss(RuntimeError(GLOO_CLOSED)) == 85 and survivor.saved == 3
    manifest = json.loads((tmp_path / "ckpt" / "step-000000003" / "burstd-checkpoint.json").read_text())
    assert manifest["reason"] == "jit" and manifest["world_size"] == 1
    # the checkpoint of the completed step exists: a later loss before the next step_done saves nothing more
    assert survivor.on_peer_loss(RuntimeError(GLOO_CLOSED)) == 85
    survivor.close()
