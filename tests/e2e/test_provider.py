"""Airflow finds walflow as it finds a provider it did not ship: through the installed package's entry points, with no
file in Airflow's DAG or plugins folder, a provider that ``airflow providers list`` shows and a plugin that registers
the snapshot DAG's timetable."""

from __future__ import annotations

import importlib
import importlib.metadata


def test_airflow_lists_walflow_as_a_provider_and_loads_its_plugin_from_the_package() -> None:
    from airflow import plugins_manager
    from airflow.providers_manager import ProvidersManager

    distribution = importlib.metadata.distribution("walflow")
    entry_points = {ep.group: ep.value for ep in distribution.entry_points}
    assert entry_points["apache_airflow_provider"] == "walflow.airflow.provider:get_provider_info"
    assert entry_points["airflow.plugins"] == "walflow.airflow.plugin:WalflowPlugin"

    provider = ProvidersManager().providers["walflow"]
    assert provider.version == distribution.version and provider.data["package-name"] == "walflow"
    # every module the description names imports: a renamed module would otherwise show only as a broken page
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for entry in provider.data[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)

    # the lake catalog's Connection type: its hook, and the form fields the UI builds without importing it
    manager = ProvidersManager()
    hook = manager.hooks["walflow_iceberg"]
    assert (
        hook is not None
        and hook.hook_class_name == "walflow.airflow.hooks.WalflowIcebergCatalogHook"
        and hook.package_name == "walflow"
    )
    fields = {
        k: v.field for k, v in manager.connection_form_widgets.items() if k.startswith("extra__walflow_iceberg__")
    }
    assert set(fields) == {"extra__walflow_iceberg__catalog_type", "extra__walflow_iceberg__warehouse"}, fields
    assert "rest" in fields["extra__walflow_iceberg__catalog_type"]["schema"]["enum"]
    assert manager.field_behaviours["walflow_iceberg"]["relabeling"]["host"] == "Catalog URI"

    (plugin,) = [p for p in plugins_manager.get_plugin_info() if p["name"] == "walflow"]
    assert "walflow.airflow.plugin:WalflowPlugin" in str(plugin["source"]), plugin[
        "source"
    ]  # the entry point, not a file
    timetables = plugins_manager.get_timetables_plugins()
    assert "walflow.airflow.timetables.BackfillOnlyTimetable" in timetables, sorted(timetables)
    assert plugins_manager.get_import_errors() == {}  # loaded once: no "already registered" from a plugins-folder copy
