"""``BottleneckModel``: PEFT's tuner for bottleneck adapters (``get_peft_model`` builds it from a
``BottleneckConfig``)."""

from peft.tuners.tuners_utils import BaseTuner

from .layer import BottleneckLayer
from .targets import layer_index, target_regex


class BottleneckModel(BaseTuner):
    """Wraps each target module in a :class:`BottleneckLayer`; only the adapters (``bn_`` parameters) and
    ``modules_to_save`` train."""

    prefix = "bn_"
    tuner_layer_cls = BottleneckLayer
    target_module_mapping = {}

    def _prepare_adapter_config(self, peft_config, model_config):
        if peft_config.target_modules is None:
            peft_config.target_modules = target_regex(model_config.get("model_type"), peft_config)
        return peft_config

    def _create_and_replace(self, peft_config, adapter_name, target, target_name, parent, current_key):
        index = layer_index(current_key, getattr(getattr(self.model, "config", None), "model_type", None))
        if index in peft_config.leave_out:
            return
        if isinstance(target, BottleneckLayer):
            target.update_layer(adapter_name, peft_config)
            return
        new_module = BottleneckLayer(target, adapter_name, peft_config, layer_index=index)
        if adapter_name not in self.active_adapters:
            new_module.requires_grad_(False)  # an added adapter trains once it is set active
        self._replace_module(parent, target_name, new_module, target)

    @classmethod
    def _remap_adapter_state_dict_for_load(cls, model, config, adapter_name, state_dict):
        """Before PEFT loads saved adapters: one error naming the module when they were made for another width."""
        state_dict = super()._remap_adapter_state_dict_for_load(model, config, adapter_name, state_dict)
        shapes = {name: tensor.shape for name, tensor in model.state_dict().items() if ".bn_" in name}
        for name, tensor in state_dict.items():
            if name in shapes and shapes[name] != tensor.shape:
                module, parameter = name.removeprefix("base_model.model.").split(".bn_", 1)
                raise ValueError(f"the saved adapter does not fit this backbone: {module}'s bn_{parameter} is "
                                 f"{list(tensor.shape)} in the adapter, {list(shapes[name])} here (an adapter made "
                                 f"for a backbone of another width)")
        return state_dict

    def _check_merge_allowed(self):
        raise ValueError("bottleneck adapters are non-linear (down, activation, up): they cannot be merged into the "
                         "base weights; use unload() to drop them, or keep the PeftModel")

    def _replace_module(self, parent, child_name, new_module, child):
        """PEFT's, but ``unload()`` puts a target back as it was: PEFT's swap copies a ``weight`` onto it, which a BERT
        output module or a feed-forward block has not."""
        if isinstance(child, BottleneckLayer) and new_module is child.get_base_layer():
            setattr(parent, child_name, new_module)
            return
        super()._replace_module(parent, child_name, new_module, child)
